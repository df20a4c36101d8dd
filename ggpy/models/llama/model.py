"""The llama forward as a ggpy graph, in ggml's ne order, and a KV cache that outlives evaluations.

Activations are tokens: x.ne = (n_embd, n_tokens). Per block: RMSNorm, q/k/v products (+ biases for qwen2), rope on
q and k, K and V written into the cache at the tokens' positions, causal attention over the cache's first n_kv rows
(grouped-query heads by mul_mat's broadcasting over dim 2), output projection and residual; RMSNorm, SwiGLU MLP,
residual. Then the final RMSNorm and the output projection (the token embedding when tied): logits ne =
(n_vocab, n_tokens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import ggpy

from .hparams import HParams


CACHE_TYPES = {"f32": ggpy.F32, "f16": ggpy.F16, "q8_0": ggpy.Q8_0}
"""The KV cache types (llama.cpp's --cache-type-k/-v choices that ggpy writes)."""


def check_heads(hp: HParams, type_k, type_v):
    """ValueError unless the heads fill whole blocks of the cache types (a view per head keeps whole blocks)."""
    for t, d, name in ((type_k, hp.head_dim, "K"), (type_v, hp.head_dim_v, "V")):
        if d % t.block:
            raise ValueError(f"a {t.name} {name} cache needs heads of a multiple of {t.block} values, not {d}")


class KVCache:
    """Keys and values of every block for up to `n_ctx` positions, in a backend buffer of their own (left alone by
    every graph plan, so they survive between evaluations): k[i].ne = (head_dim * n_head_kv, n_ctx) of type_k and
    v[i].ne = (head_dim_v * n_head_kv, n_ctx) of type_v (F32, F16 or Q8_0: each row rounded as it is written), a row
    per position. Without flash attention, attention reads V through a transposed view (unit stride along a row's
    values), which mul_mat takes in place (float V only)."""

    def __init__(self, hp: HParams, n_ctx: int, backend, type_k=ggpy.F16, type_v=ggpy.F16):
        check_heads(hp, type_k, type_v)
        ctx = ggpy.Context()
        self.n_ctx, self.type_k, self.type_v = n_ctx, type_k, type_v
        self.k = [ctx.new_tensor(type_k, (hp.head_dim * hp.n_head_kv, n_ctx)).set_name(f"cache_k.{i}")
                  for i in range(hp.n_layer)]
        self.v = [ctx.new_tensor(type_v, (hp.head_dim_v * hp.n_head_kv, n_ctx)).set_name(f"cache_v.{i}")
                  for i in range(hp.n_layer)]
        self.buffer = ggpy.alloc_ctx_tensors(ctx, backend)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.k + self.v)


def flash_attention(hp: HParams, backend, mode, type_k, type_v) -> bool:
    """Whether the graph attends by flash_attn_ext: mode "on" / "off" (or True / False), or "auto": where `backend`
    runs flash_attn_ext for these head sizes and cache types (a probe node's refusal), as llama.cpp's -fa auto.
    ValueError for "on" where the backend refuses it, and for a quantized V cache without flash attention (mul_mat
    would read V transposed, across its blocks; llama.cpp refuses it too)."""
    mode = {True: "on", False: "off"}.get(mode, mode)
    if mode not in ("on", "off", "auto"):
        raise ValueError(f"flash attention must be 'on', 'off' or 'auto', not {mode!r}")
    check_heads(hp, type_k, type_v)
    flash = mode == "on"
    if mode != "off":
        ctx = ggpy.Context()
        k, v = (ctx.new_tensor(t, (d, KV_PROBE, hp.n_head_kv)) for t, d in ((type_k, hp.head_dim), (type_v, hp.head_dim_v)))
        probe = ggpy.flash_attn_ext(ctx.new_tensor(ggpy.F32, (hp.head_dim, 1, hp.n_head)), k, v,
                                    ctx.new_tensor(ggpy.F32, (KV_PROBE, 1)), 1.0 / math.sqrt(hp.head_dim))
        runs = backend.supports_op(probe)
        if flash and not runs:
            raise ValueError(f"flash attention is on but {backend.name} does not run flash_attn_ext for this model "
                             f"(head size {hp.head_dim}, K {type_k.name}, V {type_v.name}): "
                             f"{backend.refusal(probe)}")
        flash = runs
    if not flash and type_v.quantized:
        raise ValueError(f"a {type_v.name} V cache needs flash attention (-fa on, or auto where the backend runs it); "
                         "without it use an f16 or f32 V cache")
    return flash


KV_PROBE = 256      # cache rows of the probe node that asks a backend whether it runs flash attention


@dataclass
class Inputs:
    """The graph's inputs for `n_tokens` tokens attending over the first `n_kv` cache rows (cache row i holds
    position i): token ids and positions (I32, ne = (n_tokens,); the positions also name the cache rows the tokens'
    keys and values go to), and the causal mask (F32, ne = (n_kv, n_tokens): 0 where token j may see row i, -inf
    elsewhere). The graph depends on n_tokens and n_kv only: the same graph serves every n_past it fits."""

    n_tokens: int
    n_kv: int
    tokens: ggpy.Tensor
    pos: ggpy.Tensor
    mask: ggpy.Tensor


def new_inputs(ctx, n_tokens: int, n_kv: int) -> Inputs:
    return Inputs(n_tokens, n_kv,
                  ctx.new_tensor(ggpy.I32, (n_tokens,)).set_name("tokens").set_input(),
                  ctx.new_tensor(ggpy.I32, (n_tokens,)).set_name("pos").set_input(),
                  ctx.new_tensor(ggpy.F32, (n_kv, n_tokens)).set_name("kq_mask").set_input())


# -- building blocks --------------------------------------------------------------------------------------------
def norm(m, name: str, x, eps: float):
    """RMSNorm over ne[0] times the weight `name` (ne = (n_embd,))."""
    return ggpy.mul(ggpy.rms_norm(x, eps), m.get(name))


def linear(m, prefix: str, x, bias: bool = False):
    """x.ne = (IN, n) -> (OUT, n) with `prefix`.weight ne = (IN, OUT) (any type), optional F32 bias ne = (OUT,)."""
    y = ggpy.mul_mat(m.get(f"{prefix}.weight"), x).set_name(prefix)
    return ggpy.add(y, m.get(f"{prefix}.bias")).set_name(prefix + "+bias") if bias else y


def rope(hp: HParams, x, pos, freq_factors=None):
    """ggml_rope_ext of x.ne = (head_dim, n_heads, n_tokens) at positions `pos`, in the architecture's mode."""
    mode = {"norm": 0, "neox": 2}[hp.rope_type]
    return ggpy.rope_ext(x, pos, freq_factors, hp.n_rot, mode, hp.n_ctx_orig, hp.rope_base, hp.rope_freq_scale,
                         hp.rope_ext_factor, hp.rope_attn_factor, hp.rope_beta_fast, hp.rope_beta_slow)


def attention(hp: HParams, cache: KVCache, il: int, inp: Inputs, q, k, v, flash_attn: bool = False):
    """Causal grouped-query attention of q.ne = (head_dim, n_head, n_tokens) -> ne = (head_dim_v * n_head, n_tokens).
    This ubatch's k.ne = (head_dim * n_head_kv, n_tokens) and v (likewise) are first written into block `il`'s cache
    rows at the tokens' positions (set_rows); the attention reads the cache's first n_kv rows through views of
    those writes, so it runs after them. Query head h reads KV head h // n_gqa (broadcast over dim 2): by mul_mat,
    soft_max_ext and mul_mat with V seen transposed, or with `flash_attn` by one flash_attn_ext."""
    kc = ggpy.set_rows(cache.k[il], k, inp.pos).set_name(f"blk.{il}.k_store")
    vc = ggpy.set_rows(cache.v[il], v, inp.pos).set_name(f"blk.{il}.v_store")
    hd, hd_v = hp.head_dim, hp.head_dim_v
    k = ggpy.view_3d(kc, hd, inp.n_kv, hp.n_head_kv, kc.nb[1], kc.type.row_bytes(hd))
    v = ggpy.view_3d(vc, hd_v, inp.n_kv, hp.n_head_kv, vc.nb[1], vc.type.row_bytes(hd_v))
    q = ggpy.permute(q, 0, 2, 1, 3)                                          # (head_dim, n_tokens, n_head)
    scale = 1.0 / math.sqrt(hd)
    if flash_attn:
        out = ggpy.flash_attn_ext(q, k, v, inp.mask, scale).set_name(f"blk.{il}.attn")   # (hd_v, n_head, n_tokens)
        return ggpy.reshape_2d(out, hd_v * hp.n_head, inp.n_tokens)
    kq = ggpy.mul_mat(k, q).set_name(f"blk.{il}.kq")                         # (n_kv, n_tokens, n_head)
    kq = ggpy.soft_max_ext(kq, inp.mask, scale).set_name(f"blk.{il}.softmax")
    kqv = ggpy.mul_mat(ggpy.permute(v, 1, 0, 2, 3), kq).set_name(f"blk.{il}.kqv")   # (hd_v, n_tokens, n_head)
    return ggpy.cont_2d(ggpy.permute(kqv, 0, 2, 1, 3), hd_v * hp.n_head, inp.n_tokens)


def attention_block(m, hp: HParams, cache: KVCache, il: int, inp: Inputs, x, freq_factors=None,
                    flash_attn: bool = False):
    """x + the attention sublayer of block `il`."""
    b = f"blk.{il}."
    h = norm(m, b + "attn_norm.weight", x, hp.rms_eps)
    n = inp.n_tokens
    q = ggpy.reshape_3d(linear(m, b + "attn_q", h, hp.qkv_bias), hp.head_dim, hp.n_head, n)
    k = ggpy.reshape_3d(linear(m, b + "attn_k", h, hp.qkv_bias), hp.head_dim, hp.n_head_kv, n)
    v = linear(m, b + "attn_v", h, hp.qkv_bias)
    q, k = rope(hp, q, inp.pos, freq_factors), rope(hp, k, inp.pos, freq_factors)
    k = ggpy.reshape_2d(k, hp.head_dim * hp.n_head_kv, n)
    return ggpy.add(x, linear(m, b + "attn_output", attention(hp, cache, il, inp, q, k, v, flash_attn)))


def feed_forward(m, hp: HParams, il: int, x):
    """x + SwiGLU MLP of block `il`: down(silu(gate(h)) * up(h)), h = RMSNorm(x) * ffn_norm."""
    b = f"blk.{il}."
    h = norm(m, b + "ffn_norm.weight", x, hp.rms_eps)
    g = ggpy.mul(ggpy.silu(linear(m, b + "ffn_gate", h)), linear(m, b + "ffn_up", h))
    return ggpy.add(x, linear(m, b + "ffn_down", g))


def forward(m, hp: HParams, cache: KVCache, inp: Inputs, all_logits: bool = True, flash_attn: bool = False):
    """Logits ne = (n_vocab, n_tokens), or (n_vocab, 1) of the last token without all_logits; `flash_attn`: the
    attention as one flash_attn_ext per block."""
    freq_factors = m.tensors.get("rope_freqs.weight")
    x = ggpy.get_rows(m.get("token_embd.weight"), inp.tokens)
    for il in range(hp.n_layer):
        x = attention_block(m, hp, cache, il, inp, x, freq_factors, flash_attn)
        x = feed_forward(m, hp, il, x)
    if not all_logits:
        x = ggpy.view_2d(x, hp.n_embd, 1, x.nb[1], (inp.n_tokens - 1) * x.nb[1])
    x = norm(m, "output_norm.weight", x, hp.rms_eps)
    out = m.tensors.get("output.weight", m.get("token_embd.weight"))
    return ggpy.mul_mat(out, x).set_name("logits")
