"""Copies and layout on CUDA: dup, cont (and cont_Nd), cast and cpy (elements taken from src0 and written to dst in ne
order, any strides on both sides, float types (F32, F16, BF16) converted, I32 copied as is; for cpy dst is the view of b the node
describes; 32-bit index math where the tensors fit), concat, pad (zero padding; the four leading paddings, < 4096
each, travel two to a float parameter), repeat and get_rows (a.ne = (K, R, A2, A3), b I32 (n, A2, A3) ->
(K, n, A2, A3), F32, I32 for I32 rows): one thread per dst element (grid-stride); set_rows (one thread per element
of b, float types, rows with an index outside a skipped; into Q8_0 rows a warp per 32-block, quantized as ggml's
quantize_row_q8_0)."""
from __future__ import annotations

from ....graph.tensor import contiguous_strides
from ....types import BF16, F16, F32, I32, Q8_0
from ..registry import register
from . import quant
from .common import BLOCK, FLOATS, MAX_BLOCKS, SUFFIX, elementwise_config, iparam32, tensor_ptr
from .generated import CHAIN

COPY_PAIRS = tuple((s, d) for s in (F32, F16, BF16) for d in (F32, F16, BF16)) + ((I32, I32),)
TYPES = (F32, F16, BF16, I32)
SET_ROWS_TO = FLOATS + (Q8_0,)     # a's types of set_rows (Q8_0: each 32-block quantized as ggml's q8_0)
MAX_PAD = 4096


def copy_kernel_name(node, impl=None) -> str:
    return f"copy_{SUFFIX[node.src[0].type]}_{SUFFIX[node.type]}"


def copy_refusal(node) -> str | None:
    a = node.src[0]
    if a.type.quantized or node.type.quantized:
        return quant.copy_refusal(node)
    if (a.type, node.type) not in COPY_PAIRS:
        return f"{node.op} on CUDA copies float types to float types and I32 to I32, not {a.type.name} -> {node.type.name}"
    if a.nelements != node.nelements:
        return f"{node.op}: the source has {a.nelements} elements, the destination {node.nelements}"
    return None


def _dense(t) -> bool:
    """Whether t (a Tensor, or a layout with ne, nb, type) has the strides of a contiguous tensor of its shape."""
    return tuple(t.nb) == contiguous_strides(t.type, tuple(t.ne))


def dense_copy(dst_ptr: int, dst, src_ptr: int, src) -> tuple:
    """Args.ip of a copy into a float type: (1,) where it runs 8 elements a thread with 16-byte loads and stores (dst
    and, unless quantized, src without gaps and 16-byte aligned, a multiple of 8 elements: layout.cu's copy_dense,
    quant.cuh's dequantize_k), else (0,)."""
    ok = dst.type in FLOATS and dst.nelements % 8 == 0 and dst_ptr % 16 == 0 and _dense(dst)
    return (int(ok and (src.type.quantized or (src_ptr % 16 == 0 and _dense(src)))),)


def copy_config(dst, ints: tuple) -> tuple:
    """(grid, block) of a copy: a thread per 8 elements on the dense path."""
    return (min(MAX_BLOCKS, -(-dst.nelements // (8 * BLOCK))), BLOCK) if ints[0] else elementwise_config(dst)


def _copy_ints(node) -> tuple:
    return dense_copy(tensor_ptr(node), node, tensor_ptr(node.src[0]), node.src[0])


def kernel_name(node, impl=None) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def refusal(node) -> str | None:
    a, b = node.src[0], node.src[1] if len(node.src) > 1 else None
    if a.type not in TYPES and not (node.op == "get_rows" and a.type.quantized):
        return f"{node.op} on CUDA takes F32, F16, BF16 or I32, not {a.type.name}"
    if node.op == "get_rows":
        ok = b is not None and b.type == I32 and node.type == (I32 if a.type == I32 else F32)
        return None if ok else "get_rows on CUDA takes I32 row indices"
    if node.op == "pad":
        if a.type == I32:
            return "pad on CUDA takes float types"
        if any(p >= MAX_PAD for p in node.op_params["lp"]):
            return f"pad on CUDA takes left paddings below {MAX_PAD}, got {node.op_params['lp']}"
        return None
    if node.type != a.type or (node.op == "concat" and b.type != a.type):
        return f"{node.op} on CUDA takes sources of one type and writes that type"
    return None


def params(node) -> tuple:
    if node.op == "concat":
        return (node.op_params["dim"],)
    if node.op == "pad":
        lp = node.op_params["lp"]
        return lp[0] | lp[1] << 12, lp[2] | lp[3] << 12
    return ()


register(ops=("dup", "cont", "cpy", "cast"), refusal=copy_refusal, name=copy_kernel_name,
         iparam=iparam32, int_params=_copy_ints, launch_config=lambda node: copy_config(node, _copy_ints(node)),
         fuses={"chain": CHAIN})
register(ops=("concat", "pad", "repeat", "get_rows"), refusal=refusal, name=kernel_name,
         params=params)


def set_rows_refusal(node) -> str | None:
    b, c = node.src[:2]
    if b.type not in FLOATS or node.type not in SET_ROWS_TO or c.type != I32:
        return (f"set_rows on CUDA writes float rows with I32 indices into {[t.name for t in SET_ROWS_TO]} rows, not "
                f"{b.type.name} rows into {node.type.name}")
    return None


register(ops=("set_rows",), refusal=set_rows_refusal,
         name=lambda node, impl: f"set_rows_{SUFFIX[node.src[0].type]}_{SUFFIX[node.type]}",
         launch_config=lambda node: elementwise_config(node.src[0]))
