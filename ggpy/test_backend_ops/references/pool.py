"""float64 references for pool_2d and upscale (interpolate), written with explicit loops over output positions."""
from __future__ import annotations

import math

import numpy as np

from .common import reference

FLT_MAX = float(np.finfo(np.float32).max)


@reference("pool_2d")
def _pool_2d(node, s):
    """Every window of the zero-padded plane: max over its in-bounds values, or sum / (k0 * k1)."""
    a = s[0]
    p = node.op_params
    (k0, k1), (s0, s1), (p0, p1) = p["k"], p["s"], p["p"]
    h, w = a.shape[2], a.shape[3]
    oh, ow = (h + 2 * p1 - k1) // s1 + 1, (w + 2 * p0 - k0) // s0 + 1      # ggml_pool_2d's output size
    out = np.empty(a.shape[:2] + (oh, ow))
    for oy in range(oh):
        for ox in range(ow):
            ys = [y for y in range(oy * s1 - p1, oy * s1 - p1 + k1) if 0 <= y < h]
            xs = [x for x in range(ox * s0 - p0, ox * s0 - p0 + k0) if 0 <= x < w]
            win = a[:, :, ys][:, :, :, xs]
            if p["op"] == "max":
                out[:, :, oy, ox] = win.max(axis=(2, 3)) if win.size else -FLT_MAX
            else:
                out[:, :, oy, ox] = win.sum(axis=(2, 3)) / (k0 * k1)
    return out


def _nearest(n_in: int, n_out: int) -> list:
    """The source index of each output index i as PyTorch's nearest mode defines it: floor(i * scale) in float32
    with scale = float32(n_in) / float32(n_out), at most n_in - 1 (not always the exact floor(i * n_in / n_out):
    2 -> 82 takes source 0 for output 41)."""
    scale = np.float32(n_in) / np.float32(n_out)
    return [min(int(np.floor(np.float32(i) * scale)), n_in - 1) for i in range(n_out)]


def _linear(n_in: int, n_out: int, align_corners: bool) -> list:
    """(j0, j1, w) for each output index, as PyTorch's bilinear rule."""
    out = []
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * n_in / n_out - 0.5, 0.0)
        j0 = min(math.floor(src), n_in - 1)
        out.append((j0, min(j0 + 1, n_in - 1), src - j0))
    return out


@reference("upscale")
def _upscale(node, s):
    a = s[0]
    ne0, ne1, ne2, ne3 = node.ne
    a = a[_nearest(a.shape[0], ne3)][:, _nearest(a.shape[1], ne2)]
    out = np.empty((ne3, ne2, ne1, ne0))
    if node.op_params["mode"] == "nearest":
        ys, xs = _nearest(a.shape[2], ne1), _nearest(a.shape[3], ne0)
        for i1, y in enumerate(ys):
            for i0, x in enumerate(xs):
                out[:, :, i1, i0] = a[:, :, y, x]
        return out
    ac = node.op_params["align_corners"]
    for i1, (y0, y1, wy) in enumerate(_linear(a.shape[2], ne1, ac)):
        for i0, (x0, x1, wx) in enumerate(_linear(a.shape[3], ne0, ac)):
            out[:, :, i1, i0] = ((1 - wy) * ((1 - wx) * a[:, :, y0, x0] + wx * a[:, :, y0, x1])
                                 + wy * ((1 - wx) * a[:, :, y1, x0] + wx * a[:, :, y1, x1]))
    return out
