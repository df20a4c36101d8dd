"""Opening a llama-family GGUF and checking all of it before anything is loaded.

The file is read with gguf.GGUFReader (memory-mapped), every read bounded by the file's end; then the
hyper-parameters (hparams.py) and every tensor the architecture needs: its name, shape (ggml ne order) and type;
their place (ggml's rule: each tensor starts where the previous one ends, padded to the alignment, and the file
ends with the last) is checked as the file opens (ggpy.model_file.check_layout). Any failure is
a ggpy.ModelFileError naming the file and what is wrong, never an exception of the reader or numpy.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


from ggpy import ModelFileError
from ggpy.model_file import open_gguf
from ggpy.types import FLOAT_TYPES, QUANT_TYPES

from .arch import expected_tensors
from .hparams import HParams, hparams_from_metadata

# The tensor types the runner takes: those ggpy holds (GGML's names).
SUPPORTED_TYPES = tuple(t.name.upper() for t in FLOAT_TYPES + QUANT_TYPES)


@dataclass
class LlamaGGUF:
    """A checked llama-family GGUF: metadata (key -> value), hyper-parameters, and its tensors by name
    (gguf ReaderTensors: `.data` is the memory-mapped array, `.tensor_type` the GGML type)."""

    path: str
    metadata: dict
    hparams: HParams
    tensors: dict


def read_gguf(path) -> tuple:
    """(reader, metadata) of the GGUF at `path`; ModelFileError when it is missing, not a GGUF, or cut off or
    corrupt anywhere in its header, metadata or tensor table."""
    path = os.fspath(path)
    reader = open_gguf(path)
    try:
        metadata = {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    except Exception as e:  # noqa: BLE001 - the reader fails with EOFError/ValueError/KeyError/... on bad bytes
        raise ModelFileError(f"{path} is a truncated or corrupt GGUF file ({os.path.getsize(path)} bytes; "
                             f"reading its metadata failed with {type(e).__name__}: {e})") from None
    return reader, metadata


def _check_tensor(path: str, rt, ne: tuple):
    found = tuple(int(n) for n in rt.shape)
    if found != ne:
        raise ModelFileError(f"{path}: tensor '{rt.name}' has shape {found} (ggml ne order); expected {ne}")
    type_name = rt.tensor_type.name
    if type_name not in SUPPORTED_TYPES:
        raise ModelFileError(f"{path}: tensor '{rt.name}' has type {type_name}; ggpy's llama runner reads "
                             f"{', '.join(SUPPORTED_TYPES)}")
    if len(ne) == 1 and type_name != "F32":
        raise ModelFileError(f"{path}: tensor '{rt.name}' (a norm, bias or rope factor) has type {type_name}; "
                             "expected F32")


def check_tensors(path: str, reader, hp: HParams):
    """Every required tensor present with its shape and a supported type, nothing unexpected (their layout was
    checked when the file was opened: ggpy.model_file.check_layout)."""
    if hp.n_layer > len(reader.tensors):
        raise ModelFileError(f"{path}: {hp.arch}.block_count={hp.n_layer}, but the file holds only "
                             f"{len(reader.tensors)} tensors")
    expected = expected_tensors(hp)
    tensors = {rt.name: rt for rt in reader.tensors}
    for name in tensors:
        if name not in expected:
            raise ModelFileError(f"{path}: unexpected tensor '{name}' for a {hp.arch} model of {hp.n_layer} blocks")
    for name, (ne, required) in expected.items():
        if name in tensors:
            _check_tensor(path, tensors[name], ne)
        elif required:
            raise ModelFileError(f"{path} has no tensor '{name}' (a {hp.arch} model of {hp.n_layer} blocks needs it)")
    return tensors


def open_llama(path) -> LlamaGGUF:
    """Read and check the llama-family GGUF at `path` (nothing is loaded: tensors stay memory-mapped)."""
    path = os.fspath(path)
    reader, metadata = read_gguf(path)
    hp = hparams_from_metadata(metadata, path)
    return LlamaGGUF(path, metadata, hp, check_tensors(path, reader, hp))
