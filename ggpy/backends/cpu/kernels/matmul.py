"""mul_mat on the CPU: every (i2, i3) product through BLAS (numpy.matmul into the planned output).

F16 operands are widened to F32 in a scratch block reserved from the allocator's temp heap.
"""
import numpy as np
from numba import prange

from ..registry import BoundNode, register
from .common import block, kernel, parallel_kernel
from .fp16 import half_to_float


@kernel
def widen_half_rows(dst, src, ith, nth):
    """dst (float32, contiguous) = src (uint16 half bits, any strides), shapes (ne3, ne2, ne1, ne0)."""
    ne3, ne2, ne1, ne0 = src.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3 = r // (ne2 * ne1)
        i2 = (r // ne1) % ne2
        i1 = r % ne1
        for i0 in range(ne0):
            dst[i3, i2, i1, i0] = half_to_float(src[i3, i2, i1, i0])


@parallel_kernel
def widen_half_par(dst, src, nth):
    for ith in prange(nth):
        widen_half_rows(dst, src, ith, nth)


def _f16_operands(node):
    return [s for s in node.src[:2] if s.type.dtype == np.float16]


def mul_mat_temp_size(node) -> int:
    """Bytes to widen the F16 operands to F32 (64-byte aligned each); 0 when both are F32."""
    return sum((s.nelements * 4 + 63) // 64 * 64 for s in _f16_operands(node))


def _split_broadcast(x: np.ndarray, n3: int, n2: int, bcast: bool) -> np.ndarray:
    """View (ne3, ne2, R, C) as 6-d (A3, r3, A2, r2, R, C) so a's broadcast over b is numpy broadcasting.

    For a (bcast=True) the r dimensions get stride 0; for b and dst they split ne2/ne3 into (A, r).
    """
    s3, s2, sr, sc = x.strides
    e3, e2, er, ec = x.shape
    if bcast:
        shape = (e3, n3, e2, n2, er, ec)
        strides = (s3, 0, s2, 0, sr, sc)
    else:
        a3, a2 = e3 // n3, e2 // n2
        shape = (a3, n3, a2, n2, er, ec)
        strides = (s3 * n3, s3, s2 * n2, s2, sr, sc)
    return np.lib.stride_tricks.as_strided(x, shape, strides)


@register("mul_mat", temp_size=mul_mat_temp_size, name=lambda n: "blas_sgemm" + ("+f16_widen" if _f16_operands(n) else ""))
def bind_mul_mat(b: BoundNode):
    node = b.node
    a, x, d = b.srcs[0], b.srcs[1], b.dst
    widen = []
    offset = 0
    operands = []
    for arr, t in ((a, node.src[0]), (x, node.src[1])):
        if t.type.dtype == np.float16:
            nbytes = arr.size * 4
            wide = b.temp[offset:offset + nbytes].view(np.float32).reshape(arr.shape)
            offset += (nbytes + 63) // 64 * 64
            widen.append((wide, arr, b.threads_for(arr.size)))
            arr = wide
        operands.append(arr)
    a, x = operands
    r3 = x.shape[0] // a.shape[0]
    r2 = x.shape[1] // a.shape[1]
    a6 = _split_broadcast(a, r3, r2, True).swapaxes(-1, -2)   # (..., K, M)
    x6 = _split_broadcast(x, r3, r2, False)                   # (..., N, K)
    d6 = _split_broadcast(d, r3, r2, False)                   # (..., N, M)

    def run():
        for wide, src, nth in widen:
            if nth == 1:
                widen_half_rows(wide, src, 0, 1)
            else:
                widen_half_par(wide, src, nth)
        np.matmul(x6, a6, out=d6)
    return run
