"""float64 references for the conv family. im2col, conv_1d and conv_2d come straight from the definitions
(padding by numpy, then one strided window slice per kernel tap; nothing shared with the kernels' im2col);
conv_2d_dw and conv_transpose_2d are explicit loops over the kernel taps."""
from __future__ import annotations

import numpy as np

from .common import reference


def _windows(x, n_k, s, p, d, axis, n_out):
    """For each kernel tap k: x (zero padded by p on both sides of `axis`) at k * d + s * o, o < n_out."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (p, p)
    xp = np.pad(x, pad)
    out = []
    for k in range(n_k):
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(k * d, k * d + s * (n_out - 1) + 1, s)
        out.append(xp[tuple(idx)])
    return out


def out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """A convolution's output length by its definition (every tap inside the padded input): PyTorch's and
    ggml's floor((n + 2p - d(k - 1) - 1) / s) + 1, computed here, not read from the node under test."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _conv2d(w, x, s0, s1, p0, p1, d0, d1, oh, ow):
    """w (OC, IC, KH, KW), x (N, IC, IH, IW) -> (N, OC, OH, OW)."""
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh, rows in enumerate(_windows(x, w.shape[2], s1, p1, d1, 2, oh)):
        for kw, win in enumerate(_windows(rows, w.shape[3], s0, p0, d0, 3, ow)):
            out += np.einsum("oc,nchw->nohw", w[:, :, kh, kw], win)
    return out


@reference("conv_2d")
def _conv_2d(node, s):
    p = node.op_params
    w, x = s[0], s[1]
    oh = out_size(x.shape[2], w.shape[2], p["s1"], p["p1"], p["d1"])
    ow = out_size(x.shape[3], w.shape[3], p["s0"], p["p0"], p["d0"])
    return _conv2d(w, x, p["s0"], p["s1"], p["p0"], p["p1"], p["d0"], p["d1"], oh, ow)


@reference("conv_1d")
def _conv_1d(node, s):
    p = node.op_params
    w = s[0][0][:, :, None, :]           # (OC, IC, 1, K)
    x = s[1][0][:, :, None, :]           # (N, IC, 1, L)
    out = _conv2d(w, x, p["s0"], 1, p["p0"], 0, p["d0"], 1, 1, out_size(x.shape[3], w.shape[3], p["s0"], p["p0"],
                                                                         p["d0"]))
    return out[None, :, :, 0, :]


@reference("im2col")
def _im2col(node, s):
    p = node.op_params
    a = node.src[0]
    x = s[1] if p["is_2D"] else s[1][0][:, :, None, :]
    kh_n, kw_n = (a.ne[1], a.ne[0]) if p["is_2D"] else (1, a.ne[0])
    oh = out_size(x.shape[2], kh_n, p["s1"], p["p1"], p["d1"]) if p["is_2D"] else 1
    ow = out_size(x.shape[3], kw_n, p["s0"], p["p0"], p["d0"])
    n_n, ic_n = x.shape[0], x.shape[1]
    out = np.zeros((n_n, oh, ow, ic_n, kh_n, kw_n))
    for kh, rows in enumerate(_windows(x, kh_n, p["s1"], p["p1"], p["d1"], 2, oh)):
        for kw, win in enumerate(_windows(rows, kw_n, p["s0"], p["p0"], p["d0"], 3, ow)):
            out[:, :, :, :, kh, kw] = win.transpose(0, 2, 3, 1)
    out = out.reshape(n_n, oh, ow, -1)
    return out if p["is_2D"] else out.reshape(1, n_n, ow, -1)


@reference("conv_2d_dw")
def _conv_2d_dw(node, s):
    """a (C, 1, KH, KW), b (N, C, H, W) -> (N, C, OH, OW): out[n, c] += a[c, ky, kx] * padded b at each tap."""
    p = node.op_params
    a, b = s[0], s[1]
    kh, kw = a.shape[2], a.shape[3]
    oh, ow = (out_size(b.shape[2], kh, p["s1"], p["p1"], p["d1"]), out_size(b.shape[3], kw, p["s0"], p["p0"], p["d0"]))
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
    out = np.zeros((b.shape[0], a.shape[1], (h - 1) * st + a.shape[2], (w - 1) * st + a.shape[3]))
    for ky in range(a.shape[2]):
        for kx in range(a.shape[3]):
            contrib = np.einsum("nihw,io->nohw", b, a[:, :, ky, kx])
            out[:, :, ky:ky + st * (h - 1) + 1:st, kx:kx + st * (w - 1) + 1:st] += contrib
    return out
