"""Layout references: copies, concat, pad, repeat, get_rows, set_rows."""
from __future__ import annotations

import numpy as np

from .common import quantized_roundtrip, reference, tile


@reference("dup", "cont", "cast", "cpy")
def _copy(node, s):
    """The source's elements in ne order; into a quantized type, quantized and dequantized by gguf."""
    out = s[0].reshape(tuple(reversed(node.ne)))
    return quantized_roundtrip(out, node.type) if node.type.quantized else out


@reference("concat")
def _concat(node, s):
    return np.concatenate([s[0], s[1]], axis=3 - node.op_params["dim"])


@reference("pad")
def _pad(node, s):
    lp, rp = node.op_params["lp"], node.op_params["rp"]
    return np.pad(s[0], [(lp[3 - i], rp[3 - i]) for i in range(4)])


@reference("repeat")
def _repeat(node, s):
    return tile(s[0], tuple(reversed(node.ne)))


@reference("get_rows")
def _get_rows(node, s):
    a, idx = s[0], s[1].astype(np.int64)       # a (A3, A2, R, K), idx (1, A3, A2, n)
    out = np.empty((idx.shape[1], idx.shape[2], idx.shape[3], a.shape[3]))
    for i3 in range(out.shape[0]):
        for i2 in range(out.shape[1]):
            out[i3, i2] = a[i3, i2, idx[0, i3, i2]]
    return out


@reference("set_rows")
def _set_rows(node, s):
    """a with row c[i3 % C2, i2 % C1, i1] of each (i3, i2) replaced by b's row i1 (into a quantized a: quantized and
    dequantized by gguf)."""
    b, c, out = s[0], s[1].astype(np.int64)[0], s[2].copy()      # b (A3, A2, n, K), c (C2, C1, n), a (A3, A2, R, K)
    if node.type.quantized:
        b = quantized_roundtrip(b, node.type)
    for i3 in range(b.shape[0]):
        for i2 in range(b.shape[1]):
            out[i3, i2, c[i3 % c.shape[0], i2 % c.shape[1]]] = b[i3, i2]
    return out
