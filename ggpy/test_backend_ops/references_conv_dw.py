"""float64 references for conv_2d_dw and conv_transpose_2d: explicit loops over the kernel taps."""
from __future__ import annotations

import numpy as np

from .references import reference


@reference("conv_2d_dw")
def _conv_2d_dw(node, s):
    """a (C, 1, KH, KW), b (N, C, H, W) -> (N, C, OH, OW): out[n, c] += a[c, ky, kx] * padded b at each tap."""
    p = node.op_params
    a, b = s[0], s[1]
    kh, kw = a.shape[2], a.shape[3]
    ow, oh = node.ne[0], node.ne[1]
    bp = np.pad(b, ((0, 0), (0, 0), (p["p1"], p["p1"]), (p["p0"], p["p0"])))
    out = np.zeros((b.shape[0], b.shape[1], oh, ow))
    for ky in range(kh):
        y0 = ky * p["d1"]
        for kx in range(kw):
            x0 = kx * p["d0"]
            window = bp[:, :, y0:y0 + p["s1"] * (oh - 1) + 1:p["s1"], x0:x0 + p["s0"] * (ow - 1) + 1:p["s0"]]
            out += a[:, 0, ky, kx][None, :, None, None] * window
    return out


@reference("conv_transpose_2d")
def _conv_transpose_2d(node, s):
    """a (Cin, Cout, KH, KW), b (N, Cin, H, W) -> (N, Cout, OH, OW): input pixel (iy, ix) adds
    b * a[.., ky, kx] at output (iy*stride + ky, ix*stride + kx)."""
    a, b = s[0], s[1]
    st = node.op_params["stride"]
    h, w = b.shape[2], b.shape[3]
    out = np.zeros(tuple(reversed(node.ne)))
    for ky in range(a.shape[2]):
        for kx in range(a.shape[3]):
            contrib = np.einsum("nihw,io->nohw", b, a[:, :, ky, kx])
            out[:, :, ky:ky + st * (h - 1) + 1:st, kx:kx + st * (w - 1) + 1:st] += contrib
    return out
