"""soft_max along ne[0] (scale, optional F32/F16 mask with ALiBi slopes) and diag_mask_inf.

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits and every
element goes through `load`/`store`. Both ops may run in place (dst is src0's memory): a row is read whole
before any of it is written. Contiguous rows vectorise (max, exp and sum run over float32 SIMD lanes).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ..registry import BoundNode, register
from .common import alibi_slopes, block, kernel, launch, row_index
from .fp16 import load, store
from .mathfn import fast_exp


@intrinsic
def fmaximum(typingctx, a, b):
    """max(a, b) of float32s as llvm.maximum: nan when either is nan; loops reducing with it vectorise."""
    if a != types.float32 or b != types.float32:
        return None

    def codegen(context, builder, sig, args):
        f32 = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.maximum", [f32], ir.FunctionType(f32, [f32, f32]))
        return builder.call(fn, args)
    return types.float32(a, b), codegen


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})
def sum32(x):
    """float32 sum of a 1-d float32 array, over SIMD lanes (reassociated)."""
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i]
    return s


@kernel
def soft_max_rows(d, a, m, slopes, scale, ith, nth):
    """d = softmax(a * scale + slopes[i2] * m) along ne[0], d.ne = a.ne; m is None (no mask) or has
    m.ne = (ne0, >= ne1, M2, M3), broadcast over dims 2, 3 by modulo. A row of -inf gives nan, as
    exp(-inf - -inf)."""
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    buf = np.empty(ne0, np.float32)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        arow = a[i3, i2, i1]
        mx = np.float32(-np.inf)
        if m is None:
            for i0 in range(ne0):
                v = load(arow[i0]) * scale
                buf[i0] = v
                mx = fmaximum(mx, v)
        else:
            mrow = m[i3 % m.shape[0], i2 % m.shape[1], i1]
            slope = slopes[i2]
            for i0 in range(ne0):
                v = load(arow[i0]) * scale + slope * load(mrow[i0])
                buf[i0] = v
                mx = fmaximum(mx, v)
        for i0 in range(ne0):
            buf[i0] = fast_exp(buf[i0] - mx)
        inv = np.float32(1.0) / sum32(buf)
        drow = d[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = store(buf[i0] * inv, dt)


@register("soft_max")
def bind_soft_max(b: BoundNode):
    p = b.node.op_params
    d, x, m = b.dst, b.srcs[0], b.srcs[1] if len(b.srcs) > 1 else None
    slopes = alibi_slopes(d.shape[1], p["max_bias"])
    args = (d, x, m, slopes, np.float32(p["scale"]))
    nth = b.threads_for(d.size)
    return launch(soft_max_rows, args, nth)


@kernel
def diag_mask_rows(d, a, n_past, copy, ith, nth):
    """d = a with -inf where i0 > n_past + i1; `copy` False when d is a's memory (only the -infs are written)."""
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        keep = max(0, min(ne0, n_past + i1 + 1))
        if copy:
            arow = a[i3, i2, i1]
            for i0 in range(keep):
                drow[i0] = arow[i0]
        for i0 in range(keep, ne0):
            drow[i0] = store(np.float32(-np.inf), dt)


@register("diag_mask_inf")
def bind_diag_mask_inf(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    inplace = d.__array_interface__["data"][0] == x.__array_interface__["data"][0] and d.strides == x.strides
    args = (d, x, b.node.op_params["n_past"], not inplace)
    nth = b.threads_for(d.size)
    return launch(diag_mask_rows, args, nth)
