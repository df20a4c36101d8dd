"""float64 numpy references for every op, written from ggml's documented semantics.

Each takes the node (for its op_params) and its sources as float64 arrays of shape reversed(ne)
(4-d: (ne3, ne2, ne1, ne0)) and returns the expected output in the same 4-d layout.
"""
from __future__ import annotations

import math

import numpy as np

REFERENCES = {}


def reference(*ops):
    def deco(fn):
        for op in ops:
            REFERENCES[op] = fn
        return fn
    return deco


def _tile(b: np.ndarray, shape) -> np.ndarray:
    """b repeated to `shape` (ggml broadcasting: each dimension of b divides the target's)."""
    return np.tile(b, tuple(s // t for s, t in zip(shape, b.shape)))


@reference("add", "sub", "mul", "div")
def _binary(node, s):
    a, b = s[0], _tile(s[1], s[0].shape)
    return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[node.op](a, b)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    "sqr": lambda x: x * x,
    "sqrt": np.sqrt,
    "log": np.log,
    "exp": np.exp,
    "abs": np.abs,
    "neg": np.negative,
    "sgn": np.sign,
    "step": lambda x: (x > 0).astype(np.float64),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_quick": lambda x: x * _sigmoid(1.702 * x),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "hardswish": lambda x: x * np.clip((x + 3) / 6, 0, 1),
    "hardsigmoid": lambda x: np.clip((x + 3) / 6, 0, 1),
    "sin": np.sin,
    "cos": np.cos,
}


@reference(*UNARY)
def _unary(node, s):
    with np.errstate(invalid="ignore", divide="ignore"):
        return UNARY[node.op](s[0])


@reference("scale")
def _scale(node, s):
    return s[0] * node.op_params["s"] + node.op_params["b"]


@reference("clamp")
def _clamp(node, s):
    return np.clip(s[0], node.op_params["min"], node.op_params["max"])


@reference("leaky_relu")
def _leaky_relu(node, s):
    return np.where(s[0] > 0, s[0], s[0] * node.op_params["slope"])


@reference("sum")
def _sum(node, s):
    return np.sum(s[0]).reshape(1, 1, 1, 1)


@reference("sum_rows")
def _sum_rows(node, s):
    return np.sum(s[0], axis=-1, keepdims=True)


@reference("mean")
def _mean(node, s):
    return np.mean(s[0], axis=-1, keepdims=True)


@reference("argmax")
def _argmax(node, s):
    return np.argmax(s[0], axis=-1).reshape(1, 1, 1, -1)


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
        x = x + slopes * _tile(mask, x.shape)
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


@reference("mul_mat")
def _mul_mat(node, s):
    a, b = s[0], s[1]                          # a (A3, A2, M, K), b (B3, B2, N, K)
    r3, r2 = b.shape[0] // a.shape[0], b.shape[1] // a.shape[1]
    a = np.repeat(np.repeat(a, r3, axis=0), r2, axis=1)
    return b @ np.swapaxes(a, -1, -2)


@reference("dup", "cont")
def _copy(node, s):
    return s[0].reshape(tuple(reversed(node.ne)))


@reference("cpy")
def _cpy(node, s):
    return s[0].reshape(tuple(reversed(node.ne)))


@reference("concat")
def _concat(node, s):
    return np.concatenate([s[0], s[1]], axis=3 - node.op_params["dim"])


@reference("pad")
def _pad(node, s):
    lp, rp = node.op_params["lp"], node.op_params["rp"]
    return np.pad(s[0], [(lp[3 - i], rp[3 - i]) for i in range(4)])


@reference("repeat")
def _repeat(node, s):
    return _tile(s[0], tuple(reversed(node.ne)))


@reference("get_rows")
def _get_rows(node, s):
    a, idx = s[0], s[1].astype(np.int64)       # a (A3, A2, R, K), idx (1, A3, A2, n)
    out = np.empty(tuple(reversed(node.ne)))
    for i3 in range(out.shape[0]):
        for i2 in range(out.shape[1]):
            out[i3, i2] = a[i3, i2, idx[0, i3, i2]]
    return out


@reference("win_part")
def _win_part(node, s):
    x = s[0][0]                                # (H, W, C)
    w, npx, npy = node.op_params["w"], node.op_params["npx"], node.op_params["npy"]
    h0, w0, c = x.shape
    padded = np.zeros((npy * w, npx * w, c))
    padded[:h0, :w0] = x
    win = padded.reshape(npy, w, npx, w, c).transpose(0, 2, 1, 3, 4).reshape(npy * npx, w, w, c)
    return win


@reference("win_unpart")
def _win_unpart(node, s):
    x = s[0]                                   # (np, w, w, C)
    w = node.op_params["w"]
    c, w0, h0 = node.ne[0], node.ne[1], node.ne[2]
    npx, npy = (w0 + w - 1) // w, (h0 + w - 1) // w
    full = x.reshape(npy, npx, w, w, c).transpose(0, 2, 1, 3, 4).reshape(npy * w, npx * w, c)
    return full[:h0, :w0].reshape(1, h0, w0, c)


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


from . import references_conv, references_conv_dw, references_pool  # noqa: E402,F401 - register theirs too
