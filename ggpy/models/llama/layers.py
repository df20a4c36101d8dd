"""The pieces a llama-family block is made of, as ggpy graph nodes in ggml's ne order (x.ne = (n_embd, n_tokens)).

An architecture (arch.py) names which of them its blocks use: RMSNorm before and/or after each sublayer, q/k/v
projections (separate or one fused tensor, optional biases), q/k RMSNorm per head or over the whole projection,
rope, attention over the KV cache (causal or sliding window, optional soft-capped scores), and a feed-forward
(gated MLP with SiLU or GELU, gate and up separate or fused; a mixture of experts plugs in as another FFN).
Each function reads the weights it needs from `m` (ggpy.load_gguf's model: m.get(name), m.tensors).
"""
from __future__ import annotations

import math

import ggpy


def norm(m, name: str, x, eps: float):
    """RMSNorm over ne[0] times the weight `name` (ne = (ne[0],), broadcast over the other dims)."""
    return ggpy.mul(ggpy.rms_norm(x, eps), m.get(name))


def linear(m, prefix: str, x, bias: bool = False, rows: tuple | None = None):
    """x.ne = (IN, n) -> (OUT, n) with `prefix`.weight ne = (IN, OUT) (any type), optional F32 bias ne = (OUT,).
    rows = (first, count): only those rows of the weight (a fused tensor's part; whole rows: a contiguous view)."""
    w = m.get(f"{prefix}.weight")
    name = prefix
    if rows is not None:
        w = ggpy.view_2d(w, w.ne[0], rows[1], w.nb[1], rows[0] * w.nb[1])
        name = f"{prefix}[{rows[0]}:{rows[0] + rows[1]}]"
    y = ggpy.mul_mat(w, x).set_name(name)
    return ggpy.add(y, m.get(f"{prefix}.bias")).set_name(prefix + "+bias") if bias else y


def softcap(x, cap: float, scale: float = 1.0):
    """cap * tanh(scale * x / cap) (ggml: scale, tanh, scale), the soft-capping of Gemma 2's scores and logits."""
    return ggpy.scale(ggpy.tanh(ggpy.scale(x, scale / cap)), cap)


def rope(hp, il: int, x, pos, freq_factors=None):
    """ggml_rope_ext of x.ne = (head_dim, n_heads, n_tokens) at positions `pos`, in the architecture's mode; a
    sliding-window block with its own base (hp.rope_base_swa) and no frequency scaling, as llama.cpp's."""
    mode = {"norm": 0, "neox": 2}[hp.rope_type]
    base, scale = (hp.rope_base_swa, 1.0) if hp.is_swa(il) and hp.spec.swa_rope else (hp.rope_base, hp.rope_freq_scale)
    return ggpy.rope_ext(x, pos, freq_factors, hp.n_rot, mode, hp.n_ctx_orig, base, scale,
                         hp.rope_ext_factor, hp.rope_attn_factor, hp.rope_beta_fast, hp.rope_beta_slow)


def qkv(m, hp, il: int, h):
    """The q, k, v projections of block il: ne (n_head * head_dim, n), (n_head_kv * head_dim, n),
    (n_head_kv * head_dim_v, n), from attn_q/attn_k/attn_v or the rows of one fused attn_qkv."""
    b = f"blk.{il}."
    dq, dk, dv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim, hp.n_head_kv * hp.head_dim_v
    if hp.spec.fused:
        return tuple(linear(m, b + "attn_qkv", h, rows=r) for r in ((0, dq), (dq, dk), (dq + dk, dv)))
    return tuple(linear(m, b + f"attn_{n}", h, hp.qkv_bias) for n in "qkv")


def qk_heads(m, hp, il: int, inp, q, k, freq_factors=None):
    """q, k (projections) -> ne (head_dim, heads, n), RMSNormed (per head, or over the whole projection before the
    split, as the architecture says) and roped."""
    b, n, eps = f"blk.{il}.", inp.n_tokens, hp.rms_eps
    if hp.spec.qk_norm == "full":
        q, k = norm(m, b + "attn_q_norm.weight", q, eps), norm(m, b + "attn_k_norm.weight", k, eps)
    q = ggpy.reshape_3d(q, hp.head_dim, hp.n_head, n)
    k = ggpy.reshape_3d(k, hp.head_dim, hp.n_head_kv, n)
    if hp.spec.qk_norm == "head":
        q, k = norm(m, b + "attn_q_norm.weight", q, eps), norm(m, b + "attn_k_norm.weight", k, eps)
    return rope(hp, il, q, inp.pos, freq_factors), rope(hp, il, k, inp.pos, freq_factors)


def attention(hp, cache, il: int, inp, q, k, v, flash_attn: bool = False):
    """Grouped-query attention of q.ne = (head_dim, n_head, n_tokens) -> ne = (head_dim_v * n_head, n_tokens).
    This ubatch's k.ne = (head_dim * n_head_kv, n_tokens) and v (likewise) are first written into block `il`'s cache
    rows at the tokens' positions, or at inp.cells where a batch names them (set_rows); the attention reads the cache's first n_kv rows through views of
    those writes, so it runs after them, under the causal mask or (a sliding block) the sliding-window one. Query
    head h reads KV head h // n_gqa (broadcast over dim 2): by mul_mat, [soft-cap,] soft_max_ext and mul_mat with V
    seen transposed, or with `flash_attn` by one flash_attn_ext."""
    cells = inp.pos if inp.cells is None else inp.cells
    kc = ggpy.set_rows(cache.k[il], k, cells).set_name(f"blk.{il}.k_store")
    vc = ggpy.set_rows(cache.v[il], v, cells).set_name(f"blk.{il}.v_store")
    hd, hd_v = hp.head_dim, hp.head_dim_v
    k = ggpy.view_3d(kc, hd, inp.n_kv, hp.n_head_kv, kc.nb[1], kc.type.row_bytes(hd))
    v = ggpy.view_3d(vc, hd_v, inp.n_kv, hp.n_head_kv, vc.nb[1], vc.type.row_bytes(hd_v))
    q = ggpy.permute(q, 0, 2, 1, 3)                                          # (head_dim, n_tokens, n_head)
    mask = inp.mask_swa if hp.is_swa(il) else inp.mask
    scale = hp.kq_scale or 1.0 / math.sqrt(hd)
    if flash_attn:
        out = ggpy.flash_attn_ext(q, k, v, mask, scale, logit_softcap=hp.attn_softcap).set_name(f"blk.{il}.attn")
        return ggpy.reshape_2d(out, hd_v * hp.n_head, inp.n_tokens)
    kq = ggpy.mul_mat(k, q).set_name(f"blk.{il}.kq")                         # (n_kv, n_tokens, n_head)
    if hp.attn_softcap:
        kq, scale = ggpy.tanh(ggpy.scale(kq, scale / hp.attn_softcap)), hp.attn_softcap
    kq = ggpy.soft_max_ext(kq, mask, scale).set_name(f"blk.{il}.softmax")
    kqv = ggpy.mul_mat(ggpy.permute(v, 1, 0, 2, 3), kq).set_name(f"blk.{il}.kqv")   # (hd_v, n_tokens, n_head)
    return ggpy.cont_2d(ggpy.permute(kqv, 0, 2, 1, 3), hd_v * hp.n_head, inp.n_tokens)


def self_attention(m, hp, cache, il: int, inp, h, freq_factors=None, flash_attn: bool = False):
    """The attention sublayer of block il on its (normed) input h: projections, q/k norms, rope, attention, output
    projection. ne (n_embd, n_tokens)."""
    q, k, v = qkv(m, hp, il, h)
    q, k = qk_heads(m, hp, il, inp, q, k, freq_factors)
    k = ggpy.reshape_2d(k, hp.head_dim * hp.n_head_kv, inp.n_tokens)
    return linear(m, f"blk.{il}.attn_output", attention(hp, cache, il, inp, q, k, v, flash_attn))


ACTIVATIONS = {"silu": ggpy.silu, "gelu": ggpy.gelu}    # gelu: ggml's tanh approximation (GELU-tanh)


def gated_mlp(m, hp, il: int, h):
    """down(act(gate(h)) * up(h)) of block il (SwiGLU, or GeGLU with act "gelu"); gate and up from ffn_gate and
    ffn_up, or from the halves of one fused ffn_up (gate first). ne (n_embd, n_tokens)."""
    b = f"blk.{il}."
    if hp.spec.fused:
        g, u = linear(m, b + "ffn_up", h, rows=(0, hp.n_ff)), linear(m, b + "ffn_up", h, rows=(hp.n_ff, hp.n_ff))
    else:
        g, u = linear(m, b + "ffn_gate", h), linear(m, b + "ffn_up", h)
    return linear(m, b + "ffn_down", ggpy.mul(ACTIVATIONS[hp.spec.act](g), u))


def sublayer(m, hp, il: int, x, which: str, f):
    """x + residual_scale * post_norm(f(pre_norm(x))): `which` "attn" or "ffn"; the norms the architecture has
    (arch.Arch.norms: "pre", "post" or "both"), named as llama.cpp's converter writes them."""
    b, spec = f"blk.{il}.", hp.spec
    pre, post = {"attn": ("attn_norm", "post_attention_norm"), "ffn": ("ffn_norm", "post_ffw_norm")}[which]
    h = norm(m, b + pre + ".weight", x, hp.rms_eps) if spec.norms != "post" else x
    y = f(h)
    if spec.norms != "pre":
        y = norm(m, b + post + ".weight", y, hp.rms_eps)
    if hp.residual_scale != 1.0:
        y = ggpy.scale(y, hp.residual_scale)
    return ggpy.add(x, y)


def block(m, hp, cache, il: int, inp, x, freq_factors=None, flash_attn: bool = False):
    """One transformer block: the attention sublayer, then the architecture's feed-forward (arch.Arch.ffn)."""
    x = sublayer(m, hp, il, x, "attn", lambda h: self_attention(m, hp, cache, il, inp, h, freq_factors, flash_attn))
    return sublayer(m, hp, il, x, "ffn", lambda h: hp.spec.ffn.build(m, hp, il, h))
