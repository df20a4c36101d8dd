"""What every kernel's Python side shares: the launch-argument struct (the ctypes twin of common.cuh's, which holds the
C side: F16 and BF16 conversion, indexing, block reductions, row helpers), index-width and alignment checks, the
default launch shape, and device addresses.

A kernel takes one `Args` by value: the dst pointer and up to two sources, each with ne and nb (bytes) in
ggml order, and two float parameters. By default every thread handles elements of dst at a flat index in ne
order (grid-stride); a family may choose its own grid and block per node with `launch_config(node)`.
"""
from __future__ import annotations

import ctypes

from ....errors import AllocationError
from ....types import BF16, F16, F32, I32, QUANT_TYPES

FLOATS = (F32, F16, BF16)
C_TYPES = {F32: "float", F16: "half_t", BF16: "bf16_t", I32: "int"}
SUFFIX = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32"} | {t: t.name for t in QUANT_TYPES}   # kernel names


def fits32(*tensors) -> bool:
    """Whether 32-bit index math covers these tensors (None entries ignored): fewer than 2^31 elements and byte
    extents (from the first element to past the last) under 2^31, strides not negative."""
    for t in tensors:
        if t is None:
            continue
        if t.nelements >= 1 << 31 or any(nb < 0 for nb in t.nb):
            return False
        if sum((n - 1) * nb for n, nb in zip(t.ne, t.nb)) + t.type.size >= 1 << 31:
            return False
    return True


def vector_rows(t, ptrs, align: int) -> bool:
    """Whether t's rows (dim 0) are contiguous and every row start and the given addresses fall on `align` bytes:
    kernels may then move 4 elements at once (load4 / store4)."""
    return t.nb[0] == t.type.size and all(nb % align == 0 for nb in t.nb[1:]) and all(p % align == 0 for p in ptrs)


def iparam32(node) -> int:
    """The `iop` of kernels dispatching on index width (DISPATCH_I): 1 when the node and its sources fit32."""
    return int(fits32(node, *node.src[:2]))

_I64x4 = ctypes.c_int64 * 4
BLOCK = 256
MAX_BLOCKS = 1 << 16        # grid-stride kernels loop over the rest


def elementwise_config(node) -> tuple[int, int]:
    """(grid, block) of a grid-stride kernel over dst's elements: the default launch shape."""
    return min(MAX_BLOCKS, (node.nelements + BLOCK - 1) // BLOCK), BLOCK


class Args(ctypes.Structure):
    """The C `struct Args` (common.cuh), filled once per node when a graph's launches are prepared."""

    _fields_ = [("dst", ctypes.c_void_p), ("src0", ctypes.c_void_p), ("src1", ctypes.c_void_p),
                ("n", ctypes.c_int64),
                ("ne", _I64x4), ("nb", _I64x4), ("ne0", _I64x4), ("nb0", _I64x4), ("ne1", _I64x4), ("nb1", _I64x4),
                ("p0", ctypes.c_float), ("p1", ctypes.c_float), ("src2", ctypes.c_void_p), ("iop", ctypes.c_int),
                ("ip", ctypes.c_int * 6)]


def pack_args(dst_ptr: int, dst, srcs: list, params: tuple = (), iop: int = 0, ints: tuple = ()) -> Args:
    """Args for `dst` (a tensor) at `dst_ptr` and up to two (pointer, tensor) sources; a third source's
    pointer alone goes to src2 (its layout is the kernel's to know); `params` the float parameters p0, p1,
    `iop` an integer parameter, `ints` up to six more (ip)."""
    if len(ints) > 6 or any(not -2**31 <= v < 2**31 for v in ints):
        raise ValueError(f"pack_args: integer parameters {ints}; expected at most 6 values in int32 range")
    a = Args(dst=dst_ptr, n=dst.nelements, ne=_I64x4(*dst.ne), nb=_I64x4(*dst.nb), iop=iop,
             ip=(ctypes.c_int * 6)(*ints))
    if len(srcs) > 2:
        a.src2 = srcs[2][0]
    for k, (ptr, t) in enumerate(srcs[:2]):
        setattr(a, f"src{k}", ptr)
        setattr(a, f"ne{k}", _I64x4(*t.ne))
        setattr(a, f"nb{k}", _I64x4(*t.nb))
    for k, p in enumerate(params):
        setattr(a, f"p{k}", float(p))
    return a


def tensor_ptr(t) -> int:
    """The device address of t's first element (AllocationError when t is not in CUDA memory)."""
    buf = t.buffer
    if buf is None or buf.buffer_type.is_host or not hasattr(buf, "tensor_ptr"):
        raise AllocationError(f"cuda: tensor '{t.name}' (op {t.op}) is not in CUDA memory ({type(buf).__name__}); "
                              "plan the graph with ggpy.GraphAllocator(cuda_backend)")
    return buf.tensor_ptr(t)


def extent(t) -> tuple[int, int]:
    """[first, past the last) device address of t's elements."""
    p = tensor_ptr(t)
    return p, p + max(t.nbytes, t.type.size)


def apart(t, ranges) -> bool:
    """Whether t's bytes overlap none of `ranges` ([first, past the last) device addresses, as extent gives)."""
    lo, hi = extent(t)
    return all(hi <= a or b <= lo for a, b in ranges)


def rows(node) -> int:
    """The rows (dims 1-3) of the node's first source: the blocks of a row-wise kernel."""
    s = node.src[0]
    return s.ne[1] * s.ne[2] * s.ne[3]


def row_launch(node) -> tuple:
    """(grid, block) of a block-per-row kernel: one block per row, threads by row length."""
    n = node.src[0].ne[0]
    return rows(node), (32 if n <= 64 else 256 if n <= 4096 else 1024)
