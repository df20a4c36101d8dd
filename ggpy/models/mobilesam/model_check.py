"""Checks of a MobileSAM GGUF before anything is allocated: the path is a regular file, the `mobilesam.*` metadata has
the types, lengths and values the encoder and decoder need, and the file holds exactly the tensors of the architecture
(names and shapes) where its data region says. Every refusal is a ModelFileError naming the file and what was expected.
"""
from __future__ import annotations

import math
import mmap
import os
import struct

from ggpy import ModelFileError
from ggpy.model_file import open_gguf

from .architecture import DECODER, MASK_IN_CHANS, PROMPT_DIM, TINYVIT_5M, official_shapes
from .convert import ARCH, SKIPPED_PREFIXES
from .preprocess import file_kind

_OFFICIAL = {**TINYVIT_5M, "prompt_embed_dim": PROMPT_DIM, "mask_in_chans": MASK_IN_CHANS,
             "decoder_depth": DECODER["depth"], "decoder_num_heads": DECODER["num_heads"],
             "decoder_mlp_dim": DECODER["mlp_dim"],
             "decoder_attention_downsample_rate": DECODER["attention_downsample_rate"],
             "num_multimask_outputs": DECODER["num_multimask_outputs"],
             "iou_head_hidden_dim": DECODER["iou_head_hidden_dim"]}
"""The hyper-parameters `convert` writes: MobileSAM's (it refuses checkpoints of other shapes)."""
_LARGEST_IMAGE = 4096
_MOST_KEYS, _LONGEST_ARRAY = 256, 64
"""Bounds far above what `convert` writes (26 keys, arrays of 3 or 4 items): the gguf reader parses metadata arrays
and tensor entries one Python object at a time, so a corrupt count of millions would take minutes."""
_VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # GGUF scalar types: bytes
_STRING, _ARRAY = 8, 9


def tensor_shapes() -> dict:
    """{name: ne} of every tensor a converted MobileSAM GGUF holds (BatchNorms folded, attention biases gathered)."""
    shapes = {}
    for key, torch_shape in official_shapes().items():
        if key.startswith(SKIPPED_PREFIXES) or ".bn." in key:
            continue
        if key.endswith(".c.weight"):
            prefix = key[:-len(".c.weight")]
            shapes[prefix + ".weight"], shapes[prefix + ".bias"] = torch_shape, torch_shape[:1]
        elif key.endswith(".attention_biases"):
            n = int(key.split(".")[2])
            window = TINYVIT_5M["window_sizes"][n] ** 2
            shapes[key[:-len("attention_biases")] + "ab"] = (torch_shape[0], window, window)
        else:
            shapes[key] = torch_shape
    return {k: tuple(reversed(v)) for k, v in shapes.items()}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_metadata(path: str, md: dict):
    """ModelFileError naming `path`, the key and what was expected for the first bad or missing mobilesam.* value."""
    def fail(key, what):
        value = md.get(f"{ARCH}.{key}", "<missing>")
        raise ModelFileError(f"{path}: metadata {ARCH}.{key} is {value!r}; expected {what}")

    for key in (k for k in _OFFICIAL if f"{ARCH}.{k}" not in md):
        fail(key, f"{_OFFICIAL[key]!r} (a GGUF written by `ggpy-sam convert`)")
    size = md[f"{ARCH}.image_size"]
    if not _is_int(size) or not 16 <= size <= _LARGEST_IMAGE or size % 16:
        fail("image_size", f"a whole number of pixels from 16 to {_LARGEST_IMAGE}, a multiple of 16")
    for key, want in _OFFICIAL.items():
        if key == "image_size":
            continue
        value = md[f"{ARCH}.{key}"]
        if isinstance(want, tuple):
            if not isinstance(value, list) or len(value) != len(want) or not all(_is_int(v) and v > 0 for v in value):
                fail(key, f"a list of {len(want)} positive whole numbers ({list(want)} in MobileSAM)")
            value = tuple(value)
        elif not _is_number(value) or value <= 0:
            fail(key, f"a positive number ({want} in MobileSAM)")
        if value != want:
            fail(key, f"{list(want) if isinstance(want, tuple) else want} (MobileSAM's architecture)")
    for key in ("pixel_mean", "pixel_std"):
        value = md.get(f"{ARCH}.{key}")
        if not isinstance(value, list) or len(value) != 3 or not all(_is_number(v) for v in value):
            fail(key, "a list of 3 finite numbers (one per RGB channel)")
    if not all(v > 0 for v in md[f"{ARCH}.pixel_std"]):
        fail("pixel_std", "3 positive numbers (the inputs are divided by them)")


def check_tensors(path: str, reader):
    """ModelFileError naming `path` for a tensor the architecture does not have, one it needs but the file lacks, or
    one of another shape: refused before any is allocated."""
    expected, seen = tensor_shapes(), set()
    for rt in reader.tensors:
        ne = tuple(int(n) for n in rt.shape)
        if rt.name not in expected:
            raise ModelFileError(f"{path} has a tensor '{rt.name}' (ne {ne}) that MobileSAM does not use; expected "
                                 f"only the {len(expected)} tensors `ggpy-sam convert` writes")
        if ne != expected[rt.name]:
            raise ModelFileError(f"{path}: tensor '{rt.name}' has ne {ne}; expected {expected[rt.name]}")
        seen.add(rt.name)
    missing = sorted(set(expected) - seen)
    if missing:
        raise ModelFileError(f"{path} lacks {len(missing)} of MobileSAM's tensors ('{missing[0]}' first); expected "
                             "a GGUF written by `ggpy-sam convert`")


def check_counts(path: str):
    """ModelFileError when the header or the metadata section of the GGUF at `path` counts more tensors, keys or
    array items than a MobileSAM file has, or runs past the end: read with struct, before the gguf reader would loop
    over the counts. A file too short for a header or without the GGUF magic is left to open_gguf's messages."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF" or os.fstat(f.fileno()).st_size < 24:
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with m:
        def take(fmt: str, at: int) -> tuple:
            if at + struct.calcsize(fmt) > len(m):
                raise ModelFileError(f"{path} is truncated or corrupt: its metadata runs past the end ({len(m)} bytes)")
            return struct.unpack_from(fmt, m, at)[0], at + struct.calcsize(fmt)

        n_tensors, at = take("<Q", 8)
        n_keys, at = take("<Q", at)
        if n_tensors > len(tensor_shapes()) or n_keys > _MOST_KEYS:
            raise ModelFileError(f"{path} counts {n_tensors} tensors and {n_keys} metadata keys; expected MobileSAM's "
                                 f"{len(tensor_shapes())} tensors and at most {_MOST_KEYS} keys (a corrupt header?)")
        for _ in range(n_keys):
            length, at = take("<Q", at)
            key, at = bytes(m[at:at + min(length, 80)]).decode(errors="replace"), at + length
            kind, at = take("<I", at)
            count = 1
            if kind == _ARRAY:
                kind, at = take("<I", at)
                count, at = take("<Q", at)
                if count > _LONGEST_ARRAY:
                    raise ModelFileError(f"{path}: metadata {key!r} is an array of {count} items; expected at "
                                         f"most {_LONGEST_ARRAY} in a MobileSAM file (a corrupt count?)")
            for _ in range(count):
                if kind == _STRING:
                    length, at = take("<Q", at)
                    at += length
                elif kind in _VALUE_SIZES:
                    at += _VALUE_SIZES[kind]
                else:
                    raise ModelFileError(f"{path}: metadata {key!r} has value type {kind}, which GGUF does not "
                                         "define")


def check_model(path) -> dict:
    """The metadata (key -> value) of the MobileSAM GGUF at `path` once its file, metadata and tensor table pass the
    checks above; ModelFileError otherwise (a directory, device or FIFO is named as such, not opened)."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        raise ModelFileError(f"model file {path} is {file_kind(path)}; expected a GGUF file")
    if os.path.isfile(path):
        check_counts(path)
    reader = open_gguf(path)
    try:
        md = {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    except Exception as e:  # noqa: BLE001 - gguf's contents() fails with ValueError/IndexError/... on corrupt values
        raise ModelFileError(f"{path} has corrupt metadata (the gguf reader says {type(e).__name__}: {e})") from None
    if md.get("general.architecture") != ARCH:
        raise ModelFileError(f"{path} has general.architecture={md.get('general.architecture')!r}, expected {ARCH!r}")
    check_metadata(path, md)
    check_tensors(path, reader)
    return md
