"""The llama-family forward as a ggpy graph, in ggml's ne order, and a KV cache that outlives evaluations.

Activations are tokens: x.ne = (n_embd, n_tokens). The token embeddings (times the architecture's embedding
scale), then each block as its architecture describes it (arch.py; layers.block: attention over the KV cache, then
the feed-forward, each a residual sublayer), the final RMSNorm and the output projection (the token embedding when
tied), divided by a logit scale and soft-capped where the architecture says: logits ne = (n_vocab, n_tokens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import ggpy

from . import layers
from .hparams import HParams


CACHE_TYPES = {"f32": ggpy.F32, "f16": ggpy.F16, "q8_0": ggpy.Q8_0}
"""The KV cache types (llama.cpp's --cache-type-k/-v choices that ggpy writes)."""


def cache_types(type_k: str, type_v: str) -> list:
    """[K type, V type] of the names in CACHE_TYPES (any case); ValueError naming the choices otherwise."""
    types = [CACHE_TYPES.get(str(t).lower()) for t in (type_k, type_v)]
    if None in types:
        raise ValueError(f"KV cache types must be one of {', '.join(CACHE_TYPES)}, got {type_k!r}, {type_v!r}")
    return types


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

    def __init__(self, hp: HParams, n_ctx: int, backend, type_k=ggpy.F16, type_v=ggpy.F16, spare: int = 0):
        """`spare` rows after the n_ctx ones (never attended over: batch.py's padding tokens write there)."""
        check_heads(hp, type_k, type_v)
        ctx = ggpy.Context()
        self.n_ctx, self.type_k, self.type_v = n_ctx, type_k, type_v
        rows = n_ctx + spare
        self.k = [ctx.new_tensor(type_k, (hp.head_dim * hp.n_head_kv, rows)).set_name(f"cache_k.{i}")
                  for i in range(hp.n_layer)]
        self.v = [ctx.new_tensor(type_v, (hp.head_dim_v * hp.n_head_kv, rows)).set_name(f"cache_v.{i}")
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
                                    ctx.new_tensor(ggpy.F32, (KV_PROBE, 1)), 1.0 / math.sqrt(hp.head_dim),
                                    logit_softcap=hp.attn_softcap)
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
    keys and values go to), the causal mask (F32, ne = (n_kv, n_tokens): 0 where token j may see row i, -inf
    elsewhere; None where every block slides) and, for a model with a sliding window, the sliding one (`kq_mask_swa`:
    0 only over the n_swa rows up to the token's position; mask_rows builds both). The graph depends on n_tokens and
    n_kv only: the same graph serves every n_past it fits.
    A batch of several sequences (batch.py) also has `cells` (I32 (n_tokens,): the cache rows the tokens' keys and
    values go to, apart from their positions; the masks then say which rows each token's sequence owns) and `out_ids`
    (I32 (n_out,): the tokens whose logits the graph computes, ne (n_vocab, n_out))."""

    n_tokens: int
    n_kv: int
    tokens: ggpy.Tensor
    pos: ggpy.Tensor
    mask: ggpy.Tensor | None
    mask_swa: ggpy.Tensor | None = None
    cells: ggpy.Tensor | None = None
    out_ids: ggpy.Tensor | None = None


def new_inputs(ctx, n_tokens: int, n_kv: int, hp: HParams | None = None, n_out: int = 0) -> Inputs:
    """The inputs of a graph of the model `hp`: the causal mask where a block attends causally (every block
    without hp), the sliding-window mask where one slides; with n_out, a batch's cells and out_ids too."""
    slides = [hp.is_swa(il) for il in range(hp.n_layer)] if hp else [False]

    def mask(name, used):
        return ctx.new_tensor(ggpy.F32, (n_kv, n_tokens)).set_name(name).set_input() if used else None

    def ids(name, n):
        return ctx.new_tensor(ggpy.I32, (n,)).set_name(name).set_input()
    return Inputs(n_tokens, n_kv, ids("tokens", n_tokens), ids("pos", n_tokens),
                  mask("kq_mask", not all(slides)), mask("kq_mask_swa", any(slides)),
                  ids("cells", n_tokens) if n_out else None, ids("out_ids", n_out) if n_out else None)


def mask_ramp(n_ctx: int, n_swa: int = 0) -> np.ndarray:
    """The vector whose windows are the mask rows (mask_rows): F32 (2 n_ctx,), 0 at the k with n_ctx - n_swa < k <=
    n_ctx (every k <= n_ctx without n_swa: causal), -inf elsewhere."""
    k = np.arange(2 * n_ctx)
    keep = (k <= n_ctx) & (k > n_ctx - n_swa) if n_swa else k <= n_ctx
    return np.where(keep, 0.0, -np.inf).astype(np.float32)


def mask_rows(ramp: np.ndarray, n_past: int, n_tokens: int, n_kv: int) -> np.ndarray:
    """The mask (F32 numpy (1, 1, n_tokens, n_kv)) of `n_tokens` tokens at positions n_past.. over n_kv cache rows, a
    strided view of `ramp` (mask_ramp(n_ctx, n_swa), n_past + n_tokens <= n_ctx): row j is ramp[n_ctx - n_past - j:]
    (one element earlier than row j - 1), 0 over the cache rows p <= n_past + j (causal) or with 0 <= n_past + j - p
    < n_swa (sliding: llama.cpp's LLAMA_SWA_TYPE_STANDARD), -inf elsewhere. Nothing is computed or allocated."""
    row0 = ramp[len(ramp) // 2 - n_past:]
    return np.lib.stride_tricks.as_strided(row0, (1, 1, n_tokens, n_kv), (0, 0, -row0.itemsize, row0.itemsize),
                                           writeable=False)


def forward(m, hp: HParams, cache: KVCache, inp: Inputs, all_logits: bool = True, flash_attn: bool = False):
    """Logits ne = (n_vocab, n_tokens), or (n_vocab, 1) of the last token without all_logits, or (n_vocab, n_out) of
    the tokens inp.out_ids names; `flash_attn`: the attention as one flash_attn_ext per block."""
    freq_factors = rope_factors(m, hp, cache.n_ctx)
    x = ggpy.get_rows(m.get("token_embd.weight"), inp.tokens)
    if hp.embd_scale != 1.0:
        x = ggpy.scale(x, hp.embd_scale)
    for il in range(hp.n_layer):
        x = layers.block(m, hp, cache, il, inp, x, freq_factors, flash_attn)
    if inp.out_ids is not None:
        x = ggpy.get_rows(x, inp.out_ids)
    elif not all_logits:
        x = ggpy.view_2d(x, hp.n_embd, 1, x.nb[1], (inp.n_tokens - 1) * x.nb[1])
    x = layers.norm(m, "output_norm.weight", x, hp.rms_eps)
    out = m.tensors.get("output.weight", m.get("token_embd.weight"))
    logits = ggpy.mul_mat(out, x).set_name("logits")
    if hp.logit_scale != 1.0:
        logits = ggpy.scale(logits, 1.0 / hp.logit_scale)
    if hp.final_softcap:
        logits = layers.softcap(logits, hp.final_softcap)
    return logits.set_name("logits")


def rope_factors(m, hp: HParams, n_ctx: int):
    """The rope frequency factors (ne (n_rot / 2,)) or None: `rope_freqs`, or Phi-3's LongRoPE long factors for a
    context longer than the original one, else its short ones (llama.cpp chooses by the context size, once)."""
    t = m.tensors
    if "rope_factors_long.weight" in t:
        return t["rope_factors_long.weight" if n_ctx > hp.n_ctx_orig else "rope_factors_short.weight"]
    return t.get("rope_freqs.weight")
