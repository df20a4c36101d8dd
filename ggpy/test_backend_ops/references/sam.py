"""SAM's window and relative-position references: win_part, win_unpart, get_rel_pos, add_rel_pos."""
from __future__ import annotations

import numpy as np

from .common import reference


@reference("win_part")
def _win_part(node, s):
    x = s[0]                                   # (B, H, W, C), as PyTorch SAM's window_partition
    w, npx, npy = node.op_params["w"], node.op_params["npx"], node.op_params["npy"]
    b, h0, w0, c = x.shape
    padded = np.zeros((b, npy * w, npx * w, c))
    padded[:, :h0, :w0] = x
    return padded.reshape(b, npy, w, npx, w, c).transpose(0, 1, 3, 2, 4, 5).reshape(b * npy * npx, w, w, c)


@reference("win_unpart")
def _win_unpart(node, s):
    x = s[0]                                   # (B * np, w, w, C), as PyTorch SAM's window_unpartition
    w = node.op_params["w"]
    c, w0, h0, b = node.ne
    npx, npy = (w0 + w - 1) // w, (h0 + w - 1) // w
    full = x.reshape(b, npy, npx, w, w, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, npy * w, npx * w, c)
    return full[:, :h0, :w0]


@reference("get_rel_pos")
def _get_rel_pos(node, s):
    a = s[0][0, 0]                             # (2k - 1, C)
    qh, kh = node.op_params["qh"], node.op_params["kh"]
    q = np.arange(qh)[:, None]
    k = np.arange(kh)[None, :]
    return a[(kh - 1 - k) + q].reshape(1, qh, kh, -1)


@reference("add_rel_pos")
def _add_rel_pos(node, s):
    a, pw, ph = s                              # a (.., B, QW*QH, K*K); pw, ph (B, QH, QW, K)
    k = pw.shape[3]
    b = pw.shape[0]
    scores = a.reshape(b, pw.shape[1], pw.shape[2], k, k).copy()   # (B, QH, QW, KH, KW)
    scores += ph[..., :, None] + pw[..., None, :]
    return scores.reshape(a.shape)
