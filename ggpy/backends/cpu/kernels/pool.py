"""Pooling and resampling kernels: pool_2d and upscale (interpolate), one output row at a time.

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits.
"""
import math

import numpy as np

from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index, scalar
from .fp16 import load, store

POOL_MAX, POOL_AVG = 0, 1
NEAREST, BILINEAR = 0, 1
NEG_FLT_MAX = np.float32(-3.4028234663852886e38)


@kernel
def pool_2d_rows(op, k0, k1, s0, s1, p0, p1, d, a, ith, nth):
    """d (N, C, OH, OW) = max or average (op) of a (N, C, H, W) over k0 x k1 windows, stride s, padding p."""
    ne3, ne2, ne1, ne0 = d.shape
    na1, na0 = a.shape[2], a.shape[3]
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        y0 = i1 * s1 - p1
        ky0, ky1 = max(0, -y0), min(k1, na1 - y0)
        for i0 in range(ne0):
            x0 = i0 * s0 - p0
            kx0, kx1 = max(0, -x0), min(k0, na0 - x0)
            acc = NEG_FLT_MAX if op == POOL_MAX else np.float32(0.0)
            for ky in range(ky0, ky1):
                arow = a[i3, i2, y0 + ky]
                for kx in range(kx0, kx1):
                    v = load(arow[x0 + kx])
                    if op == POOL_MAX:
                        acc = max(acc, v)
                    else:
                        acc += v
            if op == POOL_AVG:
                acc /= np.float32(k0 * k1)
            drow[i0] = store(acc, drow.dtype)


@register("pool_2d")
def bind_pool_2d(b: BoundNode):
    p = b.node.op_params
    op = POOL_MAX if p["op"] == "max" else POOL_AVG
    args = (op, *p["k"], *p["s"], *p["p"], b.dst, b.srcs[0])
    work = b.dst.size * p["k"][0] * p["k"][1]
    return launch(pool_2d_rows, args, b.threads_for(work), constants=(0,))


@scalar
def nearest(i, n_in, n_out):
    """Source index of output index i as PyTorch's nearest mode: floor(i * (n_in / n_out)) in float32, at most
    n_in - 1."""
    s = np.float32(i) * (np.float32(n_in) / np.float32(n_out))
    return min(np.int64(math.floor(s)), n_in - 1)


@scalar
def linear(i, n_in, n_out, align_corners):
    """(j0, j1, w): output index i blends source j0 with weight 1 - w and j1 with weight w, computed in float32
    as PyTorch's kernels do: scale = n_in / n_out, src = scale * (i + 0.5) - 0.5 as one fused multiply-add
    (exact in float64, then rounded once); align_corners: scale = (n_in - 1) / (n_out - 1), src = scale * i."""
    one, half = np.float32(1.0), np.float32(0.5)
    if align_corners:
        scale = np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.float32(0.0)
        src = scale * np.float32(i)
    else:
        scale = np.float32(n_in) / np.float32(n_out)
        src = max(np.float32(np.float64(scale) * np.float64(np.float32(i) + half) - 0.5), np.float32(0.0))
    j0 = min(int(src), n_in - 1)
    j1 = min(j0 + 1, n_in - 1)
    return j0, j1, min(max(src - np.float32(j0), np.float32(0.0)), one)


@kernel
def upscale_rows(mode, align_corners, d, a, ith, nth):
    """d (N', C', H', W') = a (N, C, H, W) resampled: nearest or bilinear (mode) over W and H, nearest over C, N."""
    ne3, ne2, ne1, ne0 = d.shape
    na3, na2, na1, na0 = a.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    xs0 = xs1 = wxs = None                  # bilinear: each column's taps and weight, computed once
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        plane = a[nearest(i3, na3, ne3), nearest(i2, na2, ne2)]
        if mode == NEAREST:
            arow = plane[nearest(i1, na1, ne1)]
            for i0 in range(ne0):
                drow[i0] = store(load(arow[nearest(i0, na0, ne0)]), drow.dtype)
            continue
        if xs0 is None:
            xs0, xs1, wxs = np.empty(ne0, np.int64), np.empty(ne0, np.int64), np.empty(ne0, np.float32)
            for i0 in range(ne0):
                xs0[i0], xs1[i0], wxs[i0] = linear(i0, na0, ne0, align_corners)
        y0, y1, wy = linear(i1, na1, ne1, align_corners)
        top, bottom = plane[y0], plane[y1]
        for i0 in range(ne0):
            x0, x1, wx = xs0[i0], xs1[i0], wxs[i0]
            t = load(top[x0]) * (np.float32(1.0) - wx) + load(top[x1]) * wx
            u = load(bottom[x0]) * (np.float32(1.0) - wx) + load(bottom[x1]) * wx
            drow[i0] = store(t * (np.float32(1.0) - wy) + u * wy, drow.dtype)


@register("upscale")
def bind_upscale(b: BoundNode):
    p = b.node.op_params
    mode = NEAREST if p["mode"] == "nearest" else BILINEAR
    args = (mode, p["align_corners"], b.dst, b.srcs[0])
    return launch(upscale_rows, args, b.threads_for(b.dst.size), constants=(0,))
