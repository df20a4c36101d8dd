"""ggml's block-quantized types on CUDA: dequantizing, quantizing, get_rows from them, and the dot-product kernel of
mul_mat with few columns (a quantized, or a float a grouped over b's matrices or of another type than b).

Every type is a functor `dq_<type>::at8(row, nb0, c, v)`: elements 8c .. 8c + 7 of a row (ggml's dequantize_row_*
formulas, in float32; dq_float<T> reads a float row of element stride nb0). On it:
- `copy_<q>_<f>`: dequantizing copies (cpy, cast, cont from a quantized tensor; mul_mat's dequantized operand), a
  thread per 8 elements, any strides between rows;
- `copy_f32_<q>`: quantizing copies into Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml's quantize_row_*_ref, as gguf.quants,
  without fused multiply-adds): a warp per 32-block, its lanes the block's elements;
- `get_rows_<q>`: rows dequantized into F32, a thread per 8 elements;
- `mmv_<a>_<b>`: mul_mat with at most MMV_MAX_N columns of b per matrix (generation): a warp per row of a, which it
  reads once for every column, F32 accumulation: mul_mat's implementation `mmv`. A quantized a with more columns
  runs as a cuBLASLt F16 GEMM on a dequantized copy (matmul.py's `cublaslt`).
"""
from __future__ import annotations

from ....ops.layout import QUANTIZE_TO
from ....types import F32
from .common import FLOATS, SUFFIX, tensor_ptr

MMV_MAX_N = 8           # columns of b per matrix the dot-product kernel takes (ggml's mmvq takes 8 too)
MMV_WARPS = 4           # rows of a per block
MAX_GRID_Y = 65535      # CUDA's limit on gridDim.y: the matrices of b


def copy_refusal(node) -> str | None:
    """Why a copy from or into a quantized type cannot run on CUDA (None: it can)."""
    a = node.src[0]
    if a.type.quantized and node.type in FLOATS:
        return None
    if node.type in QUANTIZE_TO and a.type == F32:
        return None if node.nelements % 32 == 0 else f"{node.op} into {node.type.name}: whole blocks of 32 only"
    return (f"{node.op} on CUDA copies a quantized type into F32, F16 or BF16, or F32 into "
            f"{', '.join(t.name for t in QUANTIZE_TO)}, not {a.type.name} -> {node.type.name}")


def mmv_fits(node) -> bool:
    """Whether the dot-product kernel can run a mul_mat: few columns of b per matrix (and at most MAX_GRID_Y
    matrices, one block row each), b float, a quantized or a float a with K a multiple of 8."""
    a, b = node.src[:2]
    if b.ne[1] > MMV_MAX_N or b.type not in FLOATS or b.ne[2] * b.ne[3] > MAX_GRID_Y:
        return False
    return a.type.quantized or (a.type in FLOATS and a.ne[0] % 8 == 0)


def mmv_preferred(node) -> bool:
    """Whether a mul_mat runs as the dot-product kernel by default (matmul.choose): where it fits, a quantized a,
    or a float a that cuBLASLt would take a matrix at a time (several matrices of a each repeated over a group of
    b's: grouped-query attention; a single matrix broadcast over b's stays on cuBLASLt, which batches it) or
    convert whole for the product (F16 weights times F32 activations)."""
    a, b = node.src[:2]
    grouped = any(1 < a.ne[k] < b.ne[k] for k in (2, 3))
    return mmv_fits(node) and (a.type.quantized or grouped or a.type != b.type)


def mmv_steps(backend, node) -> list:
    a, b = node.src[:2]
    grid = (-(-a.ne[1] // MMV_WARPS), b.ne[2] * b.ne[3])
    return [backend.launch(node, mmv_name(node), tensor_ptr(node), node, [(tensor_ptr(a), a), (tensor_ptr(b), b)],
                           config=(grid, 32 * MMV_WARPS))]


def mmv_name(node) -> str:
    return f"mmv_{SUFFIX[node.src[0].type]}_{SUFFIX[node.src[1].type]}"
