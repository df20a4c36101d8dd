"""Normalisation references: norm, rms_norm, group_norm."""
from __future__ import annotations

import numpy as np

from .common import reference


@reference("norm")
def _norm(node, s):
    x = s[0]
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + node.op_params["eps"])


@reference("rms_norm")
def _rms_norm(node, s):
    x = s[0]
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + node.op_params["eps"])


@reference("group_norm")
def _group_norm(node, s):
    x = s[0]                                   # (N, C, H, W)
    n_groups, eps = node.op_params["n_groups"], node.op_params["eps"]
    c = x.shape[1]
    per = (c + n_groups - 1) // n_groups
    out = np.empty_like(x)
    for g0 in range(0, c, per):
        part = x[:, g0:g0 + per]
        mu = part.mean(axis=(1, 2, 3), keepdims=True)
        var = ((part - mu) ** 2).mean(axis=(1, 2, 3), keepdims=True)
        out[:, g0:g0 + per] = (part - mu) / np.sqrt(var + eps)
    return out
