"""A float64 numpy forward of the llama architecture: the independent reference for ggpy's graph.

Weights are dequantized by the gguf package's own code (gguf.quants) and every step is plain numpy in float64:
RMSNorm, rope as ggml_rope_ext computes it (normal or neox pairing, frequency base and scale, the YaRN ramp and
magnitude, optional frequency factors), grouped-query causal attention over a KV cache, the SwiGLU MLP, and the
output projection (tied to the token embedding when the file has no `output.weight`).
"""
from __future__ import annotations

import math

import numpy as np
from gguf.quants import dequantize

from .gguf_file import LlamaGGUF
from .hparams import HParams


def weight(rt) -> np.ndarray:
    """A GGUF tensor as float64 values, numpy shape reversed(ne) (rows of ne[0] values)."""
    shape = tuple(reversed([int(n) for n in rt.shape]))
    return dequantize(rt.data, rt.tensor_type).astype(np.float64).reshape(shape)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _yarn_corr_dims(hp: HParams) -> tuple:
    """ggml_rope_yarn_corr_dims: the pair indices where YaRN's ramp between interpolation and extrapolation runs."""
    def corr_dim(n_rot):
        return hp.n_rot * math.log(hp.n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(hp.rope_base))
    return max(0.0, math.floor(corr_dim(hp.rope_beta_fast))), min(hp.n_rot - 1.0, math.ceil(corr_dim(hp.rope_beta_slow)))


def rope_cos_sin(positions: np.ndarray, hp: HParams, freq_factors: np.ndarray | None = None) -> tuple:
    """cos and sin, shape (n_positions, n_rot / 2), of ggml's rope (ggml_rope_cache_init + rope_yarn)."""
    i = np.arange(hp.n_rot // 2)
    theta_extrap = positions[:, None].astype(np.float64) * hp.rope_base ** (-2.0 * i / hp.n_rot)
    if freq_factors is not None:
        theta_extrap = theta_extrap / freq_factors
    theta = hp.rope_freq_scale * theta_extrap
    mscale = hp.rope_attn_factor
    if hp.rope_ext_factor != 0:
        low, high = _yarn_corr_dims(hp)
        ramp = (1 - np.clip((i - low) / max(0.001, high - low), 0, 1)) * hp.rope_ext_factor
        theta = theta * (1 - ramp) + theta_extrap * ramp
        mscale *= 1 + 0.1 * math.log(1 / hp.rope_freq_scale)
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, mode: str) -> np.ndarray:
    """Rotate the first n_rot dims of each head of x (n_tokens, n_heads, head_dim): pairs (2i, 2i+1) in "norm"
    mode, (i, i + n_rot/2) in "neox" mode; the dims after n_rot pass through."""
    n_rot = 2 * cos.shape[1]
    out = x.copy()
    if mode == "norm":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    else:
        a, b = x[..., :n_rot // 2], x[..., n_rot // 2:n_rot]
    c, s = cos[:, None, :], sin[:, None, :]
    ra, rb = a * c - b * s, a * s + b * c
    if mode == "norm":
        out[..., 0:n_rot:2], out[..., 1:n_rot:2] = ra, rb
    else:
        out[..., :n_rot // 2], out[..., n_rot // 2:n_rot] = ra, rb
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, k_pos: np.ndarray) -> np.ndarray:
    """Causal grouped-query attention: q (n, n_head, d), k/v (T, n_head_kv, d) -> (n, n_head * d_v). Query head h
    reads KV head h // (n_head / n_head_kv), as ggml's broadcasting mul_mat pairs them."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("nhd,thd->hnt", q, k) / math.sqrt(d)
    scores = np.where(k_pos[None, None, :] <= q_pos[None, :, None], scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hnt,thd->nhd", p, v).reshape(n, -1)


class Block:
    """One transformer block's float64 weights."""

    def __init__(self, tensors: dict, i: int):
        def get(name):
            rt = tensors.get(f"blk.{i}.{name}")
            return None if rt is None else weight(rt)
        self.attn_norm, self.ffn_norm = get("attn_norm.weight"), get("ffn_norm.weight")
        self.wq, self.wk, self.wv, self.wo = (get(f"attn_{n}.weight") for n in ("q", "k", "v", "output"))
        self.bq, self.bk, self.bv = (get(f"attn_{n}.bias") for n in ("q", "k", "v"))
        self.gate, self.up, self.down = (get(f"ffn_{n}.weight") for n in ("gate", "up", "down"))


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


class ReferenceModel:
    """The llama forward in float64 with a KV cache: `eval(tokens)` reads tokens after the cached ones and
    returns their logits (len(tokens), n_vocab). round_k / round_v: functions applied to the keys / values
    (n_tokens, n_head_kv, head_dim) as they enter the cache (a cache type's rounding), or None."""

    def __init__(self, model: LlamaGGUF, round_k=None, round_v=None):
        hp, t = model.hparams, model.tensors
        if hp.arch not in ("llama", "qwen2") or hp.n_swa:
            raise ValueError(f"the float64 reference computes llama and qwen2 without a sliding window, not {hp.arch}")
        self.hp = hp
        self.round_k, self.round_v = round_k or (lambda x: x), round_v or (lambda x: x)
        self.n_ctx = hp.n_ctx_train
        self.tok_embd = weight(t["token_embd.weight"])
        self.output = weight(t["output.weight"]) if "output.weight" in t else self.tok_embd
        self.output_norm = weight(t["output_norm.weight"])
        self.freq_factors = weight(t["rope_freqs.weight"]) if "rope_freqs.weight" in t else None
        self.blocks = [Block(t, i) for i in range(hp.n_layer)]
        self.reset()

    def reset(self):
        """Forget every token read."""
        self.n_past = 0
        self.cache = [(np.zeros((0, self.hp.n_head_kv, self.hp.head_dim)),
                       np.zeros((0, self.hp.n_head_kv, self.hp.head_dim_v))) for _ in self.blocks]

    def eval(self, tokens, all_logits: bool = True) -> np.ndarray:
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        if len(tokens) == 0 or self.n_past + len(tokens) > self.n_ctx:
            raise ValueError(f"cannot read {len(tokens)} tokens after {self.n_past} (context {self.n_ctx})")
        pos = np.arange(self.n_past, self.n_past + len(tokens))
        cos, sin = rope_cos_sin(pos, hp, self.freq_factors)
        x = self.tok_embd[tokens]
        for i, blk in enumerate(self.blocks):
            h = rms_norm(x, blk.attn_norm, hp.rms_eps)
            q = _linear(h, blk.wq, blk.bq).reshape(len(tokens), hp.n_head, hp.head_dim)
            k = _linear(h, blk.wk, blk.bk).reshape(len(tokens), hp.n_head_kv, hp.head_dim)
            v = _linear(h, blk.wv, blk.bv).reshape(len(tokens), hp.n_head_kv, hp.head_dim_v)
            q, k = rope(q, cos, sin, hp.rope_type), rope(k, cos, sin, hp.rope_type)
            k_all, v_all = (np.concatenate([c, n]) for c, n in zip(self.cache[i], (self.round_k(k), self.round_v(v))))
            self.cache[i] = (k_all, v_all)
            x = x + attention(q, k_all, v_all, pos, np.arange(len(k_all))) @ blk.wo.T
            h = rms_norm(x, blk.ffn_norm, hp.rms_eps)
            g = h @ blk.gate.T
            x = x + (g / (1 + np.exp(-g)) * (h @ blk.up.T)) @ blk.down.T
        self.n_past += len(tokens)
        return rms_norm(x if all_logits else x[-1:], self.output_norm, hp.rms_eps) @ self.output.T
