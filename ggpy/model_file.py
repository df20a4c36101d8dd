"""Loading a GGUF model file into a backend buffer: metadata as Python values, weights as ggpy tensors.

A tensor stored with numpy shape (d_{n-1}, ..., d_0) becomes a ggpy tensor of ne = (d_0, ..., d_{n-1}):
GGUF records ggml's ne, and its data is the C-order array of the reversed shape. Block-quantized tensors
(Q4_0 ... IQ4_XS: types.QUANT_TYPES) are copied as they are, their blocks' bytes unchanged.
"""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from .alloc import alloc_ctx_tensors
from .errors import ModelFileError
from .graph import Context, Tensor
from .types import BF16, F16, F32, QUANT_TYPES

_TYPES = {t.ggml_id: t for t in (F32, F16, BF16) + QUANT_TYPES}


@dataclass
class ModelFile:
    """The tensors of a GGUF file (in `ctx`, placed in `buffer`) and its metadata (key -> Python value)."""

    path: str
    metadata: dict
    ctx: Context
    buffer: object
    tensors: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of all its tensors."""
        return sum(t.nbytes for t in self.tensors.values())

    def get(self, name: str) -> Tensor:
        """The tensor called `name`; ModelFileError when the file has none."""
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(f"{self.path} has no tensor '{name}' ({len(self.tensors)} tensors in the file, "
                                 f"architecture {self.metadata.get('general.architecture')!r})") from None


class TensorTypeError(ValueError):
    """A tensor's type id is no GGML type, or its rows are no whole number of the type's blocks."""


MAX_ARRAY_ITEMS = 1 << 21
"""The longest metadata array a GGUF may hold here: 8x the largest tokenizer vocabularies (Gemma's 262144 tokens)."""
_VALUE_TYPES = frozenset(range(13))


def bounded_reader(path: str):
    """gguf.GGUFReader for `path` whose every read lies inside the file (the stock reader returns short arrays past
    the end, so a corrupt array length makes it loop over up to 2**64 empty elements instead of failing) and whose
    tensor table is checked first: TensorTypeError names a tensor of an unknown type or with partial blocks."""
    import gguf

    class BoundedReader(gguf.GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            end = int(offset) + np.dtype(dtype).itemsize * int(count)
            if end > len(self.data):
                raise EOFError(f"a read of {int(count)} x {np.dtype(dtype)} at byte {int(offset)} runs past the end")
            return super()._get(offset, dtype, count, override_order)

        def _get_field_parts(self, orig_offs, raw_type):
            """An array's count checked before its items are read (at most MAX_ARRAY_ITEMS, and no more than the rest
            of the file can hold), and an array of numbers read in one go: the stock reader reads item by item in
            Python, ~10 us each, so a corrupt count that still fits in the file would take minutes."""
            if raw_type != gguf.GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            itype, alen = self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)
            count, offs = int(alen[0]), orig_offs + 12
            nptype = self.gguf_scalar_to_np.get(gguf.GGUFValueType(int(itype[0]))) if int(itype[0]) in _VALUE_TYPES \
                else None
            least = np.dtype(nptype).itemsize if nptype is not None else 8      # a string's length, an array's header
            if count > MAX_ARRAY_ITEMS or count * least > len(self.data) - offs:
                raise ValueError(f"a metadata array at byte {orig_offs} counts {count} items; at most "
                                 f"{min(MAX_ARRAY_ITEMS, (len(self.data) - offs) // least)} fit")
            if nptype is None:
                return super()._get_field_parts(orig_offs, raw_type)
            items = self._get(offs, nptype, count)
            parts = [itype, alen] + [items[i:i + 1] for i in range(count)]
            return 12 + int(items.nbytes), parts, list(range(2, 2 + count)), [gguf.GGUFValueType.ARRAY,
                                                                               gguf.GGUFValueType(int(itype[0]))]

        def _build_tensors(self, start_offs, fields):
            known = frozenset(int(t) for t in gguf.GGMLQuantizationType)
            for f in fields:   # parts: name length, name, n_dims, dims, type, offset
                name, dims, type_id = bytes(f.parts[1]).decode(errors="replace"), f.parts[3], int(f.parts[4][0])
                if type_id not in known:
                    raise TensorTypeError(f"tensor '{name}' has GGML type id {type_id}, which is no type the gguf "
                                          "package knows")
                block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(type_id)][0]
                if len(dims) and int(dims[0]) % block:
                    raise TensorTypeError(f"tensor '{name}' has rows of {int(dims[0])} values, not a multiple of the "
                                          f"{block}-value blocks of its type {gguf.GGMLQuantizationType(type_id).name}")
            super()._build_tensors(start_offs, fields)

    return BoundedReader(path)


def _check_regular(path: str):
    """ModelFileError unless `path` is a regular file (followed through links), said without opening it: a FIFO
    would block the open, a device (/dev/zero) never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ModelFileError(f"model file {path} does not exist") from None
    except OSError as e:
        raise ModelFileError(f"model file {path} cannot be read: {e.strerror}") from None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character "
             "device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in kinds if test(mode)), "no regular file")
        raise ModelFileError(f"model file {path} is {kind}; expected a regular GGUF file")


def open_gguf(path: str):
    """The bounded reader of the GGUF at `path`, its data region checked (check_layout); ModelFileError when it is
    missing, not a GGUF, or cut off or corrupt in its header, metadata, tensor table or data region."""
    _check_regular(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"model file {path} cannot be read: {e.strerror}") from None
    if magic != b"GGUF":
        raise ModelFileError(f"{path} is not a GGUF file: it starts with {magic!r}, expected the magic b'GGUF'")
    try:
        reader = bounded_reader(path)
    except TensorTypeError as e:
        raise ModelFileError(f"{path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the reader fails with ValueError/IndexError/... on cut-off or corrupt files
        raise ModelFileError(f"{path} is a truncated or corrupt GGUF file ({os.path.getsize(path)} bytes; "
                             f"the gguf reader says {type(e).__name__}: {e})") from None
    check_layout(path, reader)
    return reader


def check_layout(path: str, reader) -> None:
    """ggml's layout of the data region, checked: the first tensor starts where the region does, tensor i at the end
    of tensor i-1 padded to the file's alignment, and the file ends where the last tensor does (padded or not).
    ModelFileError names the file and the tensor: a wrong tensor count, a corrupt type, shape or offset, trailing
    bytes that are no tensor's, or a cut-off file."""
    align, file_size = int(reader.alignment), len(reader.data)
    expected, end, before = int(reader.data_offset), 0, "the tensor-info table"
    for rt in reader.tensors:
        ne = tuple(int(n) for n in rt.shape)
        if math.prod(ne) != int(rt.n_elements):
            raise ModelFileError(f"{path}: tensor '{rt.name}' has ne={ne}, more elements than any file holds")
        start = int(rt.data_offset)
        if start != expected:
            raise ModelFileError(f"{path}: tensor '{rt.name}' starts at byte {start}; expected {expected}, the end of "
                                 f"{before} (padded to {align}): a tensor's type, shape or offset is corrupt")
        end = start + int(rt.n_bytes)
        if end > file_size:
            raise ModelFileError(f"{path} is truncated: tensor '{rt.name}' needs bytes up to {end}, the file has "
                                 f"{file_size}")
        expected = start + -(-int(rt.n_bytes) // align) * align
        before = f"'{rt.name}' ({rt.tensor_type.name}, {int(rt.n_bytes)} bytes)"
    if not end <= file_size <= expected:
        raise ModelFileError(f"{path}: its {len(reader.tensors)} tensors end at byte {expected} (padded to {align}), "
                             f"but the file has {file_size} bytes: {file_size - expected} bytes are no tensor's (a "
                             "wrong tensor count or a corrupt tensor table)")


def _metadata(reader) -> dict:
    return {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}


def _check_architecture(path: str, metadata: dict, architecture: str | None):
    if architecture is None:
        return
    found = metadata.get("general.architecture")
    if found != architecture:
        raise ModelFileError(f"{path} has general.architecture={found!r}, expected {architecture!r}")


def _check_tensor(path: str, rt):
    if int(rt.tensor_type) not in _TYPES:
        raise ModelFileError(f"tensor '{rt.name}' in {path} is of GGUF type {rt.tensor_type.name}; ggpy loads "
                             f"{', '.join(t.name.upper() for t in _TYPES.values())}")
    block = _TYPES[int(rt.tensor_type)].block
    if len(rt.shape) and int(rt.shape[0]) % block:
        raise ModelFileError(f"tensor '{rt.name}' in {path} has ne={tuple(int(n) for n in rt.shape)}: ne[0] must be a "
                             f"multiple of its type {rt.tensor_type.name}'s block of {block}")
    if len(rt.data.shape) > 4:
        raise ModelFileError(f"tensor '{rt.name}' in {path} has {len(rt.data.shape)} dimensions; ggpy tensors "
                             "have at most 4")


def _array(rt, type_) -> np.ndarray:
    """The tensor's values as `type_` holds them (memory-mapped when it is the file's type): the gguf reader gives
    BF16 tensors as bytes, seen here as bfloat16; a quantized tensor kept in a float type is dequantized by gguf."""
    import gguf.quants

    data = np.asarray(rt.data)
    if rt.tensor_type.name == "BF16":
        data = data.view(BF16.dtype)
    file_type = _TYPES[int(rt.tensor_type)]
    if file_type.quantized and type_ != file_type:
        if type_.quantized:
            raise ModelFileError(f"tensor '{rt.name}' is {file_type.name}; load_gguf(convert=) may keep it in F32, "
                                 f"F16 or BF16, not {type_.name}")
        data = gguf.quants.dequantize(data, rt.tensor_type)
    return data


def load_gguf(path, backend, architecture: str | None = None, convert=None) -> ModelFile:
    """Read the GGUF file at `path` (memory-mapped) and copy its F32/F16/BF16 and quantized tensors into one new
    buffer of `backend`. With `architecture`, the file's general.architecture must equal it. `convert(name, type)`
    may give the type a tensor is kept in instead of its file type (values rounded to nearest even; a quantized
    tensor only into a float type, dequantized), or None to keep it."""
    path = os.fspath(path)
    reader = open_gguf(path)
    metadata = _metadata(reader)
    _check_architecture(path, metadata, architecture)
    for rt in reader.tensors:
        _check_tensor(path, rt)
    ctx = Context()
    tensors, arrays = {}, {}
    for rt in reader.tensors:
        file_type = _TYPES[int(rt.tensor_type)]
        type_ = (convert(rt.name, file_type) if convert else None) or file_type
        arrays[rt.name] = _array(rt, type_)
        t = ctx.new_tensor(type_, tuple(int(n) for n in rt.shape) or (1,))
        tensors[rt.name] = t.set_name(rt.name)
    buffer = alloc_ctx_tensors(ctx, backend)
    for rt in reader.tensors:
        t = tensors[rt.name]
        t.set(arrays[rt.name].reshape(t.storage_shape).astype(t.type.dtype, copy=False))
    return ModelFile(path, metadata, ctx, buffer, tensors)
