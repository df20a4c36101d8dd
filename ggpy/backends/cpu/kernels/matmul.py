"""mul_mat on the CPU: each worker runs single-threaded BLAS sgemm on its share of the products.

dst[i3, i2] (N x M) = x[i3, i2] (N x K) @ a[i3 / r3, i2 / r2]^T, with arrays of shape (ne3, ne2, rows, ne0).
Work is split like ggml splits rows: over the (i3, i2) matrices, and over blocks of N rows when there are
fewer matrices than workers. An operand BLAS cannot read in place (F16, or no unit stride in either of
its two inner dimensions) is first converted to contiguous F32 in a temp block from the allocator's heap.
"""
import numpy as np
from numba import prange

from ..registry import BoundNode, register
from .blas import SGEMM_ADDRESS, sgemm
from .common import block, kernel, launch, parallel_kernel, row_index
from .elementwise import EPILOGUE_FUNCS, epilogue_code
from .fp16 import load

EPILOGUE_ROWS = 256
"""Output rows a fused mul_mat multiplies per sgemm call before applying its epilogue to them (in cache)."""


@kernel
def to_f32_rows(dst, src, ith, nth):
    """dst (float32, contiguous) = src (any element type, any strides), shapes (ne3, ne2, ne1, ne0)."""
    ne3, ne2, ne1, ne0 = src.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = dst[i3, i2, i1]
        srow = src[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = load(srow[i0])


@parallel_kernel
def to_f32_par(dst, src, nth):
    for ith in prange(nth):
        to_f32_rows(dst, src, ith, nth)


@kernel
def mul_mat_rows(fn, act, d, a, x, trans_a, lda, trans_x, ldx, bias, chunk, nsplit, ith, nth):
    """Worker ith's products: tasks (matrix, row block) ith, ith + nth, ... of nmat * nsplit, `chunk` output
    rows per sgemm call. With a bias (size M), each chunk then gets d[row] = act(d[row] + bias) while it is
    in cache: a fused add(mul_mat, bias) [+ activation]; act is an EPILOGUE_FUNCS code (compiled in)."""
    f = EPILOGUE_FUNCS[act]
    zero = np.float32(0.0)
    d3, d2, n, m = d.shape
    k = a.shape[3]
    r3 = d3 // a.shape[0]
    r2 = d2 // a.shape[1]
    ldd = d.strides[2] // 4
    work = np.empty(10, np.int32)
    for t in range(ith, d3 * d2 * nsplit, nth):
        i3 = t // (d2 * nsplit)
        i2 = (t // nsplit) % d2
        n0, n1 = block(n, t % nsplit, nsplit)
        for c0 in range(n0, n1, chunk):
            c1 = min(n1, c0 + chunk)
            sgemm(fn, work, trans_a, trans_x, m, c1 - c0, k, a[i3 // r3, i2 // r2].ctypes.data, lda,
                  x[i3, i2].ctypes.data + c0 * x.strides[2], ldx, d[i3, i2].ctypes.data + c0 * d.strides[2], ldd)
            if bias.size:
                for r in range(c0, c1):
                    row = d[i3, i2, r]
                    for j in range(m):
                        row[j] = f(row[j] + bias[j], zero, zero)


@parallel_kernel
def mul_mat_par(fn, act, d, a, x, trans_a, lda, trans_x, ldx, bias, chunk, nsplit, nth):
    for ith in prange(nth):
        mul_mat_rows(fn, act, d, a, x, trans_a, lda, trans_x, ldx, bias, chunk, nsplit, ith, nth)


def _blas_layout(arr: np.ndarray, transposed_if_rows: bool):
    """How sgemm reads the (rows x cols) matrices of `arr` in place: (transpose flag, leading dim), or None.

    Row-contiguous matrices are column-major (cols x rows) with ld = row stride; column-contiguous ones
    are column-major (rows x cols) with ld = column stride.
    """
    if arr.dtype != np.float32:
        return None
    rows, cols = arr.shape[2], arr.shape[3]
    s_row, s_col = arr.strides[2] // 4, arr.strides[3] // 4
    if cols == 1 or s_col == 1:
        ld = max(s_row if rows > 1 else cols, cols, 1)
        if rows == 1 or s_row >= cols:
            return transposed_if_rows, ld
    if rows == 1 or s_row == 1:
        ld = max(s_col if cols > 1 else rows, rows, 1)
        if cols == 1 or s_col >= rows:
            return not transposed_if_rows, ld
    return None


def _converted(node):
    """Which of (a, x) need converting to contiguous F32, judged from the node's types and strides."""
    out = []
    for t in node.src[:2]:
        view = np.lib.stride_tricks.as_strided(np.empty(1, np.float32 if t.type.size == 4 else np.float16),
                                               tuple(reversed(t.ne)), tuple(reversed(t.nb)))
        out.append(t.type.dtype != np.float32 or _blas_layout(view, True) is None)
    return out


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


def mul_mat_temp_size(node, impl=None, backend=None) -> int:
    """Bytes for contiguous F32 copies of the operands BLAS cannot read in place."""
    return sum(_aligned(t.nelements * 4) for t, conv in zip(node.src[:2], _converted(node)) if conv)


def _kernel_name(node, impl=None) -> str:
    conv = _converted(node)
    return "blas_sgemm" + ("+to_f32" if any(conv) else "")


@register("mul_mat", temp_size=mul_mat_temp_size, name=_kernel_name, blas=True)
def bind_mul_mat(b: BoundNode):
    return bind_mul_mat_epilogue(b)


def bind_mul_mat_epilogue(b: BoundNode, bias: np.ndarray | None = None, act: str | None = None):
    """mul_mat into b.dst, optionally followed by d = act(d + bias) (bias float32 (M,), act a unary op name)
    applied per block of rows by the same workers: a fused `add(mul_mat(a, x), bias)` [+ activation]."""
    d = b.dst
    operands, prepare, offset = [], [], 0
    for arr, conv in zip(b.srcs[:2], _converted(b.node)):
        if conv:
            wide = b.temp[offset:offset + arr.size * 4].view(np.float32).reshape(arr.shape)
            offset += _aligned(arr.size * 4)
            prepare.append(launch(to_f32_rows, to_f32_par, (wide, arr), b.threads_for(arr.size)))
            arr = wide
        operands.append(arr)
    a, x = _merge_batches(d, *operands)
    d = d.reshape(x.shape[:3] + (d.shape[3],))
    trans_a, lda = _blas_layout(a, True)
    trans_x, ldx = _blas_layout(x, False)
    nmat = d.shape[0] * d.shape[1]
    flops = 2 * d.size * a.shape[3]
    nth = max(1, min(b.n_threads, flops // (1 << 18)))
    nsplit = max(1, -(-nth // nmat)) if nmat < nth else 1
    if d.size == 0:
        return None
    fused = bias is not None or act is not None
    bias = (np.zeros(d.shape[3], np.float32) if bias is None else bias) if fused else np.empty(0, np.float32)
    chunk = EPILOGUE_ROWS if fused else max(1, d.shape[2])
    run = launch(mul_mat_rows, mul_mat_par, (SGEMM_ADDRESS, epilogue_code(act), d, a, x, trans_a, lda, trans_x, ldx,
                                             bias, chunk, nsplit), nth, constants=(1,))
    if not prepare:
        return run

    def run_converted():
        for step in prepare:
            step()
        run()
    return run_converted


def _merge_batches(d, a, x):
    """One matrix a applied to a batch of row-contiguous, evenly strided x matrices (and contiguous d) is
    one GEMM over all their rows: return (a, x) with x seen as (1, 1, B * N, K) when that holds."""
    b3, b2, n, k = x.shape
    if a.shape[0] * a.shape[1] != 1 or b3 * b2 == 1 or not d.flags.c_contiguous:
        return a, x
    s3, s2, s1, s0 = x.strides
    if s0 != 4 or s2 != n * s1 or (b3 > 1 and s3 != b2 * s2):
        return a, x
    return a, np.lib.stride_tricks.as_strided(x, (1, 1, b3 * b2 * n, k), (0, 0, s1, s0))
