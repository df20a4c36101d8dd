"""Tensor: the plain record every op reads and writes, and Context, which makes tensors.

Shapes are in ggml order: `ne[0]` is the innermost, contiguous dimension; `nb[i]` is the stride of
dimension i in bytes. A numpy view of a tensor has shape `reversed(ne)`.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ..errors import AllocationError, ShapeError, TypeMismatchError
from ..types import GGType, type_of

MAX_DIMS = 4

FLAG_INPUT = 1
FLAG_OUTPUT = 2
FLAG_PARAM = 4


def normalize_ne(ne, what: str = "ne") -> tuple:
    """`ne` as a tuple of 4 non-negative ints (missing trailing dimensions are 1)."""
    if isinstance(ne, (int, np.integer)):
        ne = (ne,)
    try:
        ne = tuple(int(n) for n in ne)
    except (TypeError, ValueError):
        raise ShapeError(f"{what} must be a tuple of 1 to 4 ints, got {ne!r}") from None
    if not 1 <= len(ne) <= MAX_DIMS or any(n < 0 for n in ne):
        raise ShapeError(f"{what} must be 1 to 4 non-negative ints in ggml order, got {ne}")
    return ne + (1,) * (MAX_DIMS - len(ne))


def contiguous_strides(type_: GGType, ne: tuple) -> tuple:
    """Byte strides `nb` of a contiguous tensor of shape `ne` (as ggml: nb[0] is the bytes of one block, nb[1] those
    of a row, ne[0] / block blocks)."""
    nb = [type_.size, type_.size * (ne[0] // type_.block)]
    for i in range(2, MAX_DIMS):
        nb.append(nb[i - 1] * ne[i - 1])
    return tuple(nb)


def check_blocks(type_: GGType, ne: tuple, what: str = "tensor"):
    """A ShapeError unless ne[0] is a whole number of `type_`'s blocks."""
    if ne[0] % type_.block:
        raise ShapeError(f"{what}: a {type_.name} tensor needs ne[0] to be a multiple of its block of {type_.block} "
                         f"elements, got ne={ne}")


class Tensor:
    """A node or leaf of a graph: type, shape `ne`, strides `nb`, the op that makes it and its sources.

    `buffer`/`offset` say where its bytes live once a graph allocator (or `alloc_tensors`) placed it.
    A view (`view_src` set) owns no memory: its bytes are `view_offs` bytes into `view_src`'s.
    """

    __slots__ = ("type", "ne", "nb", "op", "op_params", "src", "view_src", "view_offs", "flags",
                 "name", "buffer", "offset", "temp", "released", "ctx")

    def __init__(self, ctx, type_: GGType, ne: tuple, nb: tuple | None = None, op: str | None = None,
                 src=(), op_params=None, view_src: Tensor | None = None, view_offs: int = 0):
        self.ctx = ctx
        self.type = type_
        self.ne = ne
        self.nb = nb if nb is not None else contiguous_strides(type_, ne)
        self.op = op
        self.op_params = dict(op_params or {})
        self.src = list(src)
        self.view_src = view_src
        self.view_offs = view_offs
        self.flags = 0
        self.name = ""
        self.buffer = None
        self.offset = 0
        self.temp = None
        self.released = False

    # -- naming and flags -------------------------------------------------------------------------
    def set_name(self, name: str) -> Tensor:
        self.name = str(name)
        return self

    def format_name(self, fmt: str, *args) -> Tensor:
        return self.set_name(fmt % args)

    def set_input(self) -> Tensor:
        self.flags |= FLAG_INPUT
        return self

    def set_output(self) -> Tensor:
        self.flags |= FLAG_OUTPUT
        return self

    def set_param(self) -> Tensor:
        self.flags |= FLAG_PARAM
        return self

    @property
    def is_input(self) -> bool:
        return bool(self.flags & FLAG_INPUT)

    @property
    def is_output(self) -> bool:
        return bool(self.flags & FLAG_OUTPUT)

    @property
    def is_param(self) -> bool:
        return bool(self.flags & FLAG_PARAM)

    # -- geometry ---------------------------------------------------------------------------------
    @property
    def n_dims(self) -> int:
        """Number of dimensions, ignoring trailing dimensions of size 1 (at least 1)."""
        n = MAX_DIMS
        while n > 1 and self.ne[n - 1] == 1:
            n -= 1
        return n

    @property
    def nelements(self) -> int:
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def nrows(self) -> int:
        return self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def nbytes(self) -> int:
        """Bytes spanned by the tensor's elements given its strides (as ggml_nbytes)."""
        if any(n == 0 for n in self.ne):
            return 0
        return self.type.size + sum((n - 1) * b for n, b in zip(self.storage_ne, self.nb))

    @property
    def storage_ne(self) -> tuple:
        """ne with ne[0] counted in blocks (ne itself for the plain types)."""
        return (self.ne[0] // self.type.block,) + self.ne[1:]

    @property
    def storage_shape(self) -> tuple:
        """The 4-d numpy shape of the tensor's stored values: reversed(ne), and for a quantized type each row as its
        bytes (ne[0] / block * size uint8)."""
        row = self.type.row_bytes(self.ne[0]) if self.type.quantized else self.ne[0]
        return tuple(reversed(self.ne[1:])) + (row,)

    @property
    def storage_strides(self) -> tuple:
        """numpy strides of `storage_shape` (reversed nb; 1 along a quantized row's bytes)."""
        return tuple(reversed(self.nb[1:])) + (1 if self.type.quantized else self.nb[0],)

    @property
    def shape(self) -> tuple:
        """numpy shape: reversed(ne) with the trailing size-1 dimensions of ne dropped."""
        return tuple(reversed(self.ne[: self.n_dims]))

    def is_contiguous(self) -> bool:
        """True when elements are packed in ne order with no gaps (size-1 dimensions are ignored)."""
        expected = self.type.size
        for n, b in zip(self.storage_ne, self.nb):
            if n != 1 and b != expected:
                return False
            expected *= n
        return True

    def is_transposed(self) -> bool:
        return self.nb[0] > self.nb[1]

    def is_view(self) -> bool:
        return self.view_src is not None

    # -- data in and out --------------------------------------------------------------------------
    def _check_readable(self, action: str):
        base = self.view_src if self.view_src is not None else self
        if self.buffer is None:
            raise AllocationError(
                f"cannot {action} tensor '{self.name}' (op {self.op or 'none'}, ne={self.ne}): it has no "
                "memory yet; plan the graph first with ggpy.GraphAllocator(backend).alloc_graph(graph)")
        if base.released or self.released:
            raise AllocationError(
                f"cannot {action} tensor '{self.name}' (op {self.op}, ne={self.ne}): it is an intermediate "
                "whose memory the allocator released for reuse by later nodes; call t.set_output() (or pass "
                "it to graph.build_forward_expand) before planning to keep it")

    def set(self, array) -> Tensor:
        """Write a numpy array into the tensor; its shape must be `self.shape` or the full 4-d reversed(ne). A
        quantized tensor takes its blocks as bytes: a uint8 array of `storage_shape`'s size (as gguf.quants.quantize
        gives)."""
        self._check_readable("set")
        self.buffer.set_tensor(self, self.checked_values(array))
        return self

    def checked_values(self, array) -> np.ndarray:
        """`array` as `set` writes it (full 4-d reversed(ne), or storage_shape blocks for a quantized tensor), after
        checking its shape and kind (ShapeError / TypeMismatchError naming the tensor)."""
        arr = np.asarray(array)
        if self.type.quantized:
            if arr.dtype != np.uint8 or arr.size != int(np.prod(self.storage_shape)):
                raise TypeMismatchError(f"tensor '{self.name}' is {self.type.name} ne={self.ne}: set() expects its "
                                        f"blocks as a uint8 array of shape {self.storage_shape}, got {arr.dtype} "
                                        f"{arr.shape}")
            return arr.reshape(self.storage_shape)
        full = tuple(reversed(self.ne))
        if arr.shape != self.shape and arr.shape != full:
            raise ShapeError(f"tensor '{self.name}' has ne={self.ne}: set() expects an array of shape "
                             f"{self.shape} (or {full}), got {arr.shape}")
        if self.type.dtype.kind == "i" and arr.dtype.kind not in "iub":
            raise TypeMismatchError(f"tensor '{self.name}' is {self.type.name}: set() expects an integer array, "
                                    f"got dtype {arr.dtype}")
        if self.type.dtype.kind == "f" and arr.dtype.kind not in "fiub":
            raise TypeMismatchError(f"tensor '{self.name}' is {self.type.name}: set() expects a real array, "
                                    f"got dtype {arr.dtype}")
        return arr.reshape(full)

    def numpy(self) -> np.ndarray:
        """A copy of the tensor's values, shape `self.shape` (a quantized tensor's blocks as uint8 bytes, shape
        `storage_shape`: gguf.quants.dequantize gives their values)."""
        self._check_readable("read")
        if self.type.quantized:
            return self.buffer.get_tensor(self).reshape(self.storage_shape[MAX_DIMS - self.n_dims:])
        return self.buffer.get_tensor(self).reshape(self.shape)

    def __repr__(self) -> str:
        return (f"Tensor(name={self.name!r}, op={self.op}, type={self.type.name}, ne={self.ne}, "
                f"nb={self.nb})")


_CREATION_HOOKS: ContextVar[tuple] = ContextVar("ggpy_creation_hooks", default=())


@contextmanager
def creation_hook(hook):
    """Call hook(t) for every tensor an op adds to any Context inside the block (in this thread or task only;
    blocks nest). The scheduler's `with sched.on(backend)` pins tensors this way."""
    token = _CREATION_HOOKS.set((*_CREATION_HOOKS.get(), hook))
    try:
        yield
    finally:
        _CREATION_HOOKS.reset(token)


class Context:
    """Makes tensors (ggml_context without the memory pool: data lives in backend buffers)."""

    def __init__(self):
        self.tensors: list[Tensor] = []

    def new_tensor(self, type_, ne) -> Tensor:
        """A new leaf tensor of `type_` (ggpy.F32/F16/BF16/I32 or a quantized type, ne[0] a whole number of its
        blocks) and shape `ne` (1 to 4 ints, ggml order)."""
        type_, ne = type_of(type_), normalize_ne(ne)
        check_blocks(type_, ne, "new_tensor")
        t = Tensor(self, type_, ne)
        self.tensors.append(t)
        return t

    def new_tensor_1d(self, type_, ne0: int) -> Tensor:
        return self.new_tensor(type_, (ne0,))

    def new_tensor_2d(self, type_, ne0: int, ne1: int) -> Tensor:
        return self.new_tensor(type_, (ne0, ne1))

    def new_tensor_3d(self, type_, ne0: int, ne1: int, ne2: int) -> Tensor:
        return self.new_tensor(type_, (ne0, ne1, ne2))

    def new_tensor_4d(self, type_, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
        return self.new_tensor(type_, (ne0, ne1, ne2, ne3))

    def add(self, t: Tensor) -> Tensor:
        self.tensors.append(t)
        for hook in _CREATION_HOOKS.get():
            hook(t)
        return t
