"""norm (LayerNorm without affine), rms_norm and group_norm.

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits and every
element goes through `load`/`store`. Means and variances are two-pass float64 sums, accurate for long rows.
Every op may run in place (dst is src0's memory): an element is read for the last time just before the same
element is written.
"""
import math

import numpy as np
from numba import njit

from ...kernel import Fused
from ..registry import BoundNode, register, same_memory, vector
from .common import block, kernel, launch, row_index
from .activations import EPILOGUE_FUNCS, epilogue_code
from .fp16 import load, store
from .mathfn import row_sum


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})
def row_sum_sq(row, center):
    """float64 sum of (row[i] - center)^2 of a 1-d array."""
    s = 0.0
    for i0 in range(row.shape[0]):
        t = load(row[i0]) - center
        s += t * t
    return s


@njit(nogil=True, cache=True, error_model="numpy")
def row_mean_inv_std(row, eps):
    """(mean, 1 / sqrt(var + eps)) of a 1-d array, two-pass in float64."""
    n = row.shape[0]
    mean = row_sum(row) / n
    return mean, 1.0 / math.sqrt(row_sum_sq(row, mean) / n + eps)


@kernel
def norm_rows(d, a, eps, ith, nth):
    """d = (a - mean) / sqrt(var + eps) along ne[0], d.ne = a.ne."""
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        arow = a[i3, i2, i1]
        mean, inv = row_mean_inv_std(arow, eps)
        drow = d[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = store(np.float32((load(arow[i0]) - mean) * inv), dt)


@kernel
def norm_affine_rows(act, d, a, w, bias, eps, ith, nth):
    """d = act((a - mean) / sqrt(var + eps) * w + bias) along ne[0] (w, bias float32 (ne0,)): a fused
    LayerNorm. act: an EPILOGUE_FUNCS code (0: none). d is float32."""
    f = EPILOGUE_FUNCS[act]
    zero = np.float32(0.0)
    ne3, ne2, ne1, ne0 = d.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        arow = a[i3, i2, i1]
        mean, inv = row_mean_inv_std(arow, eps)
        m32, inv32 = np.float32(mean), np.float32(inv)
        drow = d[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = f((load(arow[i0]) - m32) * inv32 * w[i0] + bias[i0], zero, zero)


def bind_norm_affine(b: BoundNode, w: np.ndarray, bias: np.ndarray, act: str | None = None):
    """A fused `act(add(mul(norm(a), w), bias))` into b.dst (float32, a's shape; may be a's memory)."""
    args = (epilogue_code(act), b.dst, b.srcs[0], w, bias, b.node.op_params["eps"])
    return launch(norm_affine_rows, args, b.threads_for(b.dst.size), constants=(0,))


@kernel
def rms_norm_rows(d, a, w, eps, ith, nth):
    """d = a / sqrt(mean(a^2) + eps) [* w] along ne[0], d.ne = a.ne; w None or the weight (ne0,) of d's type (the
    rms_norm_mul pattern: each product rounded as the unfused mul's)."""
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        arow = a[i3, i2, i1]
        inv = np.float32(1.0 / math.sqrt(row_sum_sq(arow, 0.0) / ne0 + eps))
        drow = d[i3, i2, i1]
        if w is None:
            for i0 in range(ne0):
                drow[i0] = store(load(arow[i0]) * inv, dt)
        else:
            for i0 in range(ne0):
                drow[i0] = store(load(store(load(arow[i0]) * inv, dt)) * load(w[i0]), dt)


@kernel
def add_rms_norm_rows(s, d, a, b, w, eps, ith, nth):
    """s = a + b, then d = s / sqrt(mean(s^2) + eps) [* w] along ne[0], all float32 of one shape (w None or (ne0,)):
    a residual add and the RMSNorm reading it (and its weight), as rms_norm_rows computes it. Each row of a and b is
    read before that row of s and d is written (d may be exactly a's, b's or s's memory)."""
    ne3, ne2, ne1, ne0 = d.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        arow, brow, srow = a[i3, i2, i1], b[i3, i2, i1], s[i3, i2, i1]
        for i0 in range(ne0):
            srow[i0] = arow[i0] + brow[i0]
        inv = np.float32(1.0 / math.sqrt(row_sum_sq(srow, 0.0) / ne0 + eps))
        drow = d[i3, i2, i1]
        if w is None:
            for i0 in range(ne0):
                drow[i0] = srow[i0] * inv
        else:
            for i0 in range(ne0):
                drow[i0] = srow[i0] * inv * w[i0]


def _run_add_rms_norm(b: BoundNode, fused):
    """The add (b: its node, sources, and the last node's memory as dst), the norm [and its weight] as
    add_rms_norm_rows, or None where the result's memory partly overlaps the sum's."""
    total = fused.head.buffer.kernel_view(fused.head)
    if np.may_share_memory(b.dst, total) and not same_memory(b.dst, total):
        return None
    w = None if fused.weight is None else vector(fused.weight)
    args = (total, b.dst, b.srcs[0], b.srcs[1], w, fused.norm.op_params["eps"])
    return launch(add_rms_norm_rows, args, b.threads_for(b.dst.size))


def _run_rms_norm_mul(b: BoundNode, fused):
    """rms_norm_rows with the weight, into the mul's memory (exactly over the norm's source at most: rowwise)."""
    args = (b.dst, b.srcs[0], vector(fused.weight), fused.head.op_params["eps"])
    return launch(rms_norm_rows, args, b.threads_for(b.dst.size))


def _run_norm_affine(b: BoundNode, fused):
    return bind_norm_affine(b, vector(fused.scale), vector(fused.bias), fused.act)


def _f32(fused) -> bool:
    return all(t.type.size == 4 and not t.type.quantized for t in fused.computed + fused.head.src[:2])


@register("norm", "rms_norm", fuses={
    "norm_affine": Fused(_run_norm_affine, act=True, rowwise=True, takes=lambda node, impl: node.type.size == 4),
    "add_rms_norm": Fused(_run_add_rms_norm, rowwise=True, scale=True, accepts=_f32),
    "rms_norm_mul": Fused(_run_rms_norm_mul, rowwise=True)})
def bind_norm(b: BoundNode):
    nth = b.threads_for(b.dst.size)
    if b.node.op == "norm":
        return launch(norm_rows, (b.dst, b.srcs[0], b.node.op_params["eps"]), nth)
    return launch(rms_norm_rows, (b.dst, b.srcs[0], None, b.node.op_params["eps"]), nth)


@kernel
def group_norm_groups(d, a, per, eps, ith, nth):
    """d.ne = a.ne = (W, H, C, N): each i3 and group of `per` channels (the last may have fewer) normalised over
    its W * H * channels elements."""
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    n_groups = (ne2 + per - 1) // per
    g0, g1 = block(ne3 * n_groups, ith, nth)
    for g in range(g0, g1):
        i3 = g // n_groups
        c0 = (g % n_groups) * per
        c1 = min(ne2, c0 + per)
        n = (c1 - c0) * ne1 * ne0
        s = 0.0
        for i2 in range(c0, c1):
            for i1 in range(ne1):
                s += row_sum(a[i3, i2, i1])
        mean = s / n
        v = 0.0
        for i2 in range(c0, c1):
            for i1 in range(ne1):
                v += row_sum_sq(a[i3, i2, i1], mean)
        inv = 1.0 / math.sqrt(v / n + eps)
        for i2 in range(c0, c1):
            for i1 in range(ne1):
                arow = a[i3, i2, i1]
                drow = d[i3, i2, i1]
                for i0 in range(ne0):
                    drow[i0] = store(np.float32((load(arow[i0]) - mean) * inv), dt)


@register("group_norm")
def bind_group_norm(b: BoundNode):
    d = b.dst
    p = b.node.op_params
    per = (d.shape[1] + p["n_groups"] - 1) // p["n_groups"]
    args = (d, b.srcs[0], per, p["eps"])
    units = d.shape[0] * ((d.shape[1] + per - 1) // per)
    nth = min(units, b.threads_for(d.size))
    return launch(group_norm_groups, args, nth)
