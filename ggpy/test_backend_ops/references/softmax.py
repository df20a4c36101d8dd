"""Softmax references: soft_max (mask, scale, ggml's ALiBi slopes) and diag_mask_inf."""
from __future__ import annotations

import math

import numpy as np

from .common import reference, tile


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ALiBi slope of each head, as ggml's soft_max (1 for every head when max_bias is 0)."""
    if max_bias <= 0:
        return np.ones(n_head)
    n_log2 = 2 ** int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)])


@reference("soft_max")
def _soft_max(node, s):
    x = s[0] * node.op_params["scale"]
    if len(s) > 1 and s[1] is not None:
        mask = s[1][:, :, : x.shape[2], :]
        slopes = alibi_slopes(x.shape[1], node.op_params["max_bias"]).reshape(1, -1, 1, 1)
        x = x + slopes * tile(mask, x.shape)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@reference("diag_mask_inf")
def _diag_mask_inf(node, s):
    x = s[0].copy()
    ne1, ne0 = x.shape[2], x.shape[3]
    i1, i0 = np.meshgrid(np.arange(ne1), np.arange(ne0), indexing="ij")
    x[:, :, i0 > node.op_params["n_past"] + i1] = -np.inf
    return x
