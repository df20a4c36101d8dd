"""The llama forward as a ggpy graph, in ggml's ne order, and a KV cache that outlives evaluations.

Activations are tokens: x.ne = (n_embd, n_tokens). Per block: RMSNorm, q/k/v products (+ biases for qwen2), rope on
q and k, K and V written into the cache at rows n_past.., causal attention over the cache's first n_kv rows
(grouped-query heads by mul_mat's broadcasting over dim 2), output projection and residual; RMSNorm, SwiGLU MLP,
residual. Then the final RMSNorm and the output projection (the token embedding when tied): logits ne =
(n_vocab, n_tokens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import ggpy

from .hparams import HParams


class KVCache:
    """Keys and values of every block for up to `n_ctx` positions, in a backend buffer of their own (left alone by
    every graph plan, so they survive between evaluations): k[i].ne = (head_dim * n_head_kv, n_ctx) and
    v[i].ne = (head_dim_v * n_head_kv, n_ctx), a row per position. Attention reads V through a transposed view
    (unit stride along a row's values), which mul_mat takes in place."""

    def __init__(self, hp: HParams, n_ctx: int, backend):
        ctx = ggpy.Context()
        self.n_ctx = n_ctx
        self.k = [ctx.new_tensor(ggpy.F32, (hp.head_dim * hp.n_head_kv, n_ctx)).set_name(f"cache_k.{i}")
                  for i in range(hp.n_layer)]
        self.v = [ctx.new_tensor(ggpy.F32, (hp.head_dim_v * hp.n_head_kv, n_ctx)).set_name(f"cache_v.{i}")
                  for i in range(hp.n_layer)]
        self.buffer = ggpy.alloc_ctx_tensors(ctx, backend)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.k + self.v)


@dataclass
class Inputs:
    """The graph's inputs for `n_tokens` tokens read after `n_past` cached ones, attending over `n_kv` cache rows:
    token ids and positions (I32, ne = (n_tokens,)), and the causal mask (F32, ne = (n_kv, n_tokens): 0 where
    token j may see cache row i, -inf elsewhere)."""

    n_past: int
    n_tokens: int
    n_kv: int
    tokens: ggpy.Tensor
    pos: ggpy.Tensor
    mask: ggpy.Tensor


def new_inputs(ctx, n_past: int, n_tokens: int, n_kv: int) -> Inputs:
    return Inputs(n_past, n_tokens, n_kv,
                  ctx.new_tensor(ggpy.I32, (n_tokens,)).set_name("tokens").set_input(),
                  ctx.new_tensor(ggpy.I32, (n_tokens,)).set_name("pos").set_input(),
                  ctx.new_tensor(ggpy.F32, (n_kv, n_tokens)).set_name("kq_mask").set_input())


# -- building blocks --------------------------------------------------------------------------------------------
def norm(m, name: str, x, eps: float):
    """RMSNorm over ne[0] times the weight `name` (ne = (n_embd,))."""
    return ggpy.mul(ggpy.rms_norm(x, eps), m.get(name))


def linear(m, prefix: str, x, bias: bool = False):
    """x.ne = (IN, n) -> (OUT, n) with `prefix`.weight ne = (IN, OUT) (any type), optional F32 bias ne = (OUT,)."""
    y = ggpy.mul_mat(m.get(f"{prefix}.weight"), x)
    return ggpy.add(y, m.get(f"{prefix}.bias")) if bias else y


def rope(hp: HParams, x, pos, freq_factors=None):
    """ggml_rope_ext of x.ne = (head_dim, n_heads, n_tokens) at positions `pos`, in the architecture's mode."""
    mode = {"norm": 0, "neox": 2}[hp.rope_type]
    return ggpy.rope_ext(x, pos, freq_factors, hp.n_rot, mode, hp.n_ctx_orig, hp.rope_base, hp.rope_freq_scale,
                         hp.rope_ext_factor, hp.rope_attn_factor, hp.rope_beta_fast, hp.rope_beta_slow)


def write_kv(cache: KVCache, il: int, inp: Inputs, k, v) -> list:
    """The copies of this ubatch's k and v (ne = (n_embd_k, n_tokens), (n_embd_v, n_tokens)) into cache rows
    n_past.. of block `il`: cpy into views of the cache tensors."""
    n, p = inp.n_tokens, inp.n_past
    return [ggpy.cpy(new, ggpy.view_2d(c, c.ne[0], n, c.nb[1], p * c.nb[1]))
            for new, c in ((k, cache.k[il]), (v, cache.v[il]))]


def attention(hp: HParams, cache: KVCache, il: int, inp: Inputs, q):
    """Causal grouped-query attention of q.ne = (head_dim, n_head, n_tokens) over the first n_kv cache rows of block
    `il` -> ne = (head_dim_v * n_head, n_tokens). Query head h reads KV head h // n_gqa (mul_mat's broadcast)."""
    kc, vc = cache.k[il], cache.v[il]
    k = ggpy.view_3d(kc, hp.head_dim, inp.n_kv, hp.n_head_kv, kc.nb[1], hp.head_dim * kc.nb[0])
    v = ggpy.view_3d(vc, hp.head_dim_v, inp.n_kv, hp.n_head_kv, vc.nb[1], hp.head_dim_v * vc.nb[0])
    v = ggpy.permute(v, 1, 0, 2, 3)                                          # (n_kv, head_dim_v, n_head_kv)
    kq = ggpy.mul_mat(k, ggpy.permute(q, 0, 2, 1, 3))                       # (n_kv, n_tokens, n_head)
    kq = ggpy.soft_max_ext(kq, inp.mask, 1.0 / math.sqrt(hp.head_dim))
    kqv = ggpy.mul_mat(v, kq)                                                # (head_dim_v, n_tokens, n_head)
    return ggpy.cont_2d(ggpy.permute(kqv, 0, 2, 1, 3), hp.head_dim_v * hp.n_head, inp.n_tokens)


def attention_block(m, hp: HParams, cache: KVCache, il: int, inp: Inputs, x, writes: list, freq_factors=None):
    """x + the attention sublayer of block `il`; appends the block's KV cache copies to `writes`."""
    b = f"blk.{il}."
    h = norm(m, b + "attn_norm.weight", x, hp.rms_eps)
    n = inp.n_tokens
    q = ggpy.reshape_3d(linear(m, b + "attn_q", h, hp.qkv_bias), hp.head_dim, hp.n_head, n)
    k = ggpy.reshape_3d(linear(m, b + "attn_k", h, hp.qkv_bias), hp.head_dim, hp.n_head_kv, n)
    v = linear(m, b + "attn_v", h, hp.qkv_bias)
    q, k = rope(hp, q, inp.pos, freq_factors), rope(hp, k, inp.pos, freq_factors)
    writes += write_kv(cache, il, inp, ggpy.reshape_2d(k, hp.head_dim * hp.n_head_kv, n), v)
    return ggpy.add(x, linear(m, b + "attn_output", attention(hp, cache, il, inp, q)))


def feed_forward(m, hp: HParams, il: int, x):
    """x + SwiGLU MLP of block `il`: down(silu(gate(h)) * up(h)), h = RMSNorm(x) * ffn_norm."""
    b = f"blk.{il}."
    h = norm(m, b + "ffn_norm.weight", x, hp.rms_eps)
    g = ggpy.mul(ggpy.silu(linear(m, b + "ffn_gate", h)), linear(m, b + "ffn_up", h))
    return ggpy.add(x, linear(m, b + "ffn_down", g))


def forward(m, hp: HParams, cache: KVCache, inp: Inputs, all_logits: bool = True) -> tuple:
    """(logits ne = (n_vocab, n_tokens), or (n_vocab, 1) of the last token without all_logits; the KV cache
    copies): each block's copies must run before its attention reads the cache, so the caller expands them into
    the graph first, in block order."""
    freq_factors = m.tensors.get("rope_freqs.weight")
    x = ggpy.get_rows(m.get("token_embd.weight"), inp.tokens)
    writes = []
    for il in range(hp.n_layer):
        x = attention_block(m, hp, cache, il, inp, x, writes, freq_factors)
        x = feed_forward(m, hp, il, x)
    if not all_logits:
        x = ggpy.view_2d(x, hp.n_embd, 1, x.nb[1], (inp.n_tokens - 1) * x.nb[1])
    x = norm(m, "output_norm.weight", x, hp.rms_eps)
    out = m.tensors.get("output.weight", m.get("token_embd.weight"))
    return ggpy.mul_mat(out, x).set_name("logits"), writes


def build_graph(m, hp: HParams, cache: KVCache, inp: Inputs, all_logits: bool = True) -> tuple:
    """(graph, logits) of `forward`: every block's cache copies expanded before the nodes that read the cache."""
    logits, writes = forward(m, hp, cache, inp, all_logits)
    graph = ggpy.Graph()
    for w in writes:
        graph.build_forward_expand(w)
    return graph.build_forward_expand(logits), logits
