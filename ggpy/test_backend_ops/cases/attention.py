"""Cases for flash_attn_ext: a generated token and a prompt, grouped-query heads, F32/F16 K and V read through
views of a cache (as a llama graph does), causal masks with a fully masked row, F16/F32 masks broadcast over heads,
logit softcap, ALiBi, Dv != D, several sequences, heads of 256; decode shapes (1-4 query rows over up to 4096 cache
rows whose tail is masked, as a padded KV cache) with F32, F16 and Q8_0 K and V, where the CPU splits the KV length;
masks whose live keys lie inside the cache (SPANS: a server's batch of several sequences, a sliding window, per-head
masks), where the CPU reads only each row's live span."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...types import F16, F32, Q4_K, Q8_0
from ..harness import OpCase
from ..references import evaluate
from .matmul import DECODE_Q8_NMSE
from .util import leaf

CASES = [  # (D, Dv, N, n_kv, H, Hk, S, mask type, scale, max_bias, softcap)
    (64, 64, 1, 37, 9, 3, 1, F16, 0.125, 0.0, 0.0),
    (64, 64, 7, 37, 9, 3, 1, F16, 0.125, 0.0, 0.0),
    (32, 32, 20, 20, 8, 1, 1, F32, 0.2, 0.0, 0.0),
    (16, 24, 5, 13, 4, 4, 2, F16, 0.25, 0.0, 30.0),
    (16, 16, 6, 9, 6, 2, 1, F32, 0.5, 8.0, 0.0),
    (48, 48, 3, 300, 2, 2, 1, None, 0.1, 0.0, 0.0),
    # head dims 64 and 128 (CUDA's): decode over a long cache split in chunks, prompt chunks (tensor cores for F16)
    (64, 64, 1, 4096, 32, 8, 1, F16, 0.125, 0.0, 0.0),
    (128, 128, 2, 1000, 8, 2, 1, F32, 0.088, 0.0, 0.0),
    (128, 128, 4, 300, 4, 4, 2, F16, 0.08, 0.0, 30.0),
    (64, 64, 3, 50, 6, 2, 1, F32, 0.5, 8.0, 0.0),
    (64, 64, 33, 200, 8, 2, 1, F16, 0.125, 0.0, 0.0),
    (128, 128, 70, 150, 4, 1, 1, F32, 0.088, 0.0, 0.0),
    # heads of 256 (Gemma-2/3) with a softcap: a generated token, a prompt chunk
    (256, 256, 1, 600, 4, 1, 1, F16, 0.0625, 0.0, 50.0),
    (256, 256, 33, 200, 4, 1, 1, F16, 0.0625, 0.0, 50.0),
]
TC_NMSE = 5e-5      # F16 K and V for 16+ query rows may run on tensor cores (q and P rounded to F16)


DECODE = [  # (D, N, n_kv, H, Hk, K type, V type): a generated token or a few over a cache
    (64, 1, 256, 9, 3, F16, F16),
    (64, 1, 1000, 9, 3, F16, F16),
    (64, 1, 1000, 9, 3, Q8_0, Q8_0),
    (64, 1, 1000, 9, 3, F32, F32),
    (64, 2, 1024, 9, 3, Q8_0, F16),
    (128, 3, 4096, 32, 8, F16, F16),
    (128, 1, 4096, 32, 8, Q8_0, Q8_0),
    (64, 4, 2048, 8, 2, F16, Q8_0),
    (32, 1, 700, 4, 1, F32, Q8_0),
    (256, 1, 1000, 4, 1, Q8_0, Q8_0),
    (256, 2, 600, 8, 2, F16, F32),
]


PROMPT = [  # (D, N, n_kv, H, Hk, K type, V type): prompt chunks over a quantized or mixed cache (CUDA: tensor cores
    # for F16 / Q8_0 K and V, Q8_0 values rounded to F16)
    (64, 33, 200, 8, 2, Q8_0, Q8_0),
    (128, 70, 150, 4, 1, F16, Q8_0),
    (64, 20, 100, 4, 4, Q8_0, F32),
    (256, 40, 300, 4, 1, Q8_0, F16),
]


SPANS = [  # (D, N, n_kv, H, Hk, K/V type, mask heads, kind): live keys a span of the cache, not its first rows (_spans)
    (64, 16, 4000, 9, 3, F16, 1, "batch"),
    (64, 4, 4000, 9, 3, F16, 1, "batch"),
    (128, 24, 2000, 8, 2, F16, 1, "parts"),
    (64, 12, 1500, 8, 2, Q8_0, 1, "offset"),
    (256, 10, 1200, 4, 1, F16, 1, "window"),
    (64, 1, 3000, 9, 3, F16, 1, "window"),
    (64, 9, 900, 8, 2, F16, 4, "heads"),
]


def _spans(kind):
    """A fill whose mask lets query row i (at position n_kv - N + i) see, of the n_kv keys: `batch` its own range of
    the cache (row i: sequence N - 1 - i of N, each n_kv // N rows of which a varying prefix is live, as a server's
    batch of one token a sequence); `parts` the first half of the rows a prompt part (causal over the first n_kv // 4
    keys), the others single tokens of sequences in the cache's second half; `offset` a causal span starting at key 700; `window`
    and `heads` the 200 (heads: 40 + 90 * mask head) keys up to its position; row 1 sees nothing, and in `heads` mask
    head 0 of row 0 neither; other leafs as _causal."""
    def fill(rng, t):
        if t.name != "mask":
            return _causal(rng, t)
        n_kv, rows, heads = t.ne[0], t.ne[1], t.ne[2]
        m, n = np.full((heads, rows, n_kv), -np.inf), rows - 1
        for hm in range(heads):
            for i in range(rows):
                pos, per, half = n_kv - n + i, n_kv // n, n // 2
                at = n_kv // 2 + (i - half) * (n_kv // 2 // (n - half))
                lo, hi = {"batch": ((n - 1 - i) * per, (n - 1 - i) * per + 1 + 97 * i % (per - 1)),
                          "parts": (0, n_kv // 4 + i) if i < half else (at, at + 50),
                          "offset": (700, 701 + (n_kv - 701) * i // n), "window": (pos - 199, pos + 1),
                          "heads": (pos - 39 - 90 * hm, pos + 1)}[kind]
                if i != 1 and (kind != "heads" or (i, hm) != (0, 0)):
                    m[hm, i, max(lo, 0):hi] = 0.0
        return m.reshape(tuple(reversed(t.ne)))
    return fill


def _causal(rng, t):
    """For the leaf named 'mask': 0 where key j <= the query's position (n_kv - N + i), else -inf, the second row
    -inf throughout (its output is zeros); other float leafs uniform in [-1, 1) (quantized: random blocks)."""
    shape = tuple(reversed(t.ne))
    if t.type.quantized:
        return None
    if t.name != "mask":
        return rng.uniform(-1.0, 1.0, size=shape)
    n_kv, rows = t.ne[0], t.ne[1]
    i, j = np.indices((rows, n_kv))
    m = np.where((j <= n_kv - rows + i) & (i != 1), 0.0, -np.inf)
    return np.broadcast_to(m, shape)


def _padded(rng, t):
    """For the leaf named 'mask': a padded cache's causal mask (query i at position n_past + i sees keys j <= n_past
    + i; keys past the last position, a quarter of the cache, -inf for every query); other leafs as _causal."""
    if t.name != "mask":
        return _causal(rng, t)
    n_kv, rows = t.ne[0], t.ne[1]
    i, j = np.indices((rows, n_kv))
    return np.broadcast_to(np.where(j <= n_kv * 3 // 4 - rows + i, 0.0, -np.inf), tuple(reversed(t.ne)))


def _flash(ctx, d, dv, n, n_kv, h, hk, s, mtype, scale, max_bias, softcap, kv_type=F16, cached=True, v_type=None,
           mask_heads=1):
    """q (D, N, H, S); k, v permuted views of caches (D, Hk, n_kv + 2, S) when `cached`, else contiguous leafs; V of
    type v_type (default kv_type); the mask (n_kv, N + 1, mask_heads)."""
    if cached:
        views = []
        for width, t in ((d, kv_type), (dv, v_type or kv_type)):
            c = leaf(ctx, t, (width, hk, n_kv + 2, s))
            views.append(ops.permute(ops.view_4d(c, width, hk, n_kv, s, c.nb[1], c.nb[2], c.nb[3], 0), 0, 2, 1, 3))
        k, v = views
    else:
        k, v = leaf(ctx, kv_type, (d, n_kv, hk, s)), leaf(ctx, v_type or kv_type, (dv, n_kv, hk, s))
    mask = leaf(ctx, mtype, (n_kv, n + 1, mask_heads)).set_name("mask") if mtype is not None else None
    return ops.flash_attn_ext(leaf(ctx, F32, (d, n, h, s)), k, v, mask, scale, max_bias, softcap)


HANDOFF = [  # (D, n_kv, H, Hk, W type, M): a generated token's attention, then the o projection and its residual
    (64, 576, 32, 8, Q4_K, 2048),       # the 1B's: CUDA's fa_dec in a cluster hands its output over as q8_1 blocks
    (64, 1500, 32, 8, Q8_0, 2048),      # (kernels/handoff.py), the stream kernel reading them
    (128, 700, 16, 4, Q4_K, 300),       # fa_vec_k in a cluster (heads of 128)
    (64, 37, 9, 3, Q8_0, 576),          # SmolLM2's: a one-launch product (b quantized by its blocks): no hand-off
]


def _attention_output(ctx, d, n_kv, h, hk, wt, m):
    """r + W . reshape(flash_attn_ext(q, K, V, mask)) for one query row: the o projection of a generated token."""
    o = _flash(ctx, d, d, 1, n_kv, h, hk, 1, F16, d ** -0.5, 0.0, 0.0)
    y = ops.mul_mat(leaf(ctx, wt, (d * h, m)), ops.reshape_2d(o, d * h, 1))
    return ops.add(leaf(ctx, F32, (m, 1)), y)


def cases():
    out = []
    for kv_type in (F32, F16):
        for cached in (True, False):
            for c in CASES:
                out.append(OpCase("flash_attn_ext", f"kv={kv_type.name},cached={cached},D={c[0]},Dv={c[1]},N={c[2]},"
                                  f"n_kv={c[3]},H={c[4]}/{c[5]},S={c[6]},mask={getattr(c[7], 'name', None)},"
                                  f"scale={c[8]},max_bias={c[9]},softcap={c[10]}", lambda ctx, c=c, t=kv_type,
                                  cached=cached: _flash(ctx, *c, kv_type=t, cached=cached), fill=_causal,
                                  max_nmse=TC_NMSE if kv_type == F16 and c[2] >= 16 else 1e-7))
    for d, n, n_kv, h, hk, kt, vt in DECODE:
        out.append(OpCase("flash_attn_ext", f"decode,k={kt.name},v={vt.name},D={d},N={n},n_kv={n_kv},H={h}/{hk}",
                          lambda ctx, c=(d, d, n, n_kv, h, hk, 1, F16, d ** -0.5, 0.0, 0.0), kt=kt, vt=vt: _flash(
                              ctx, *c, kv_type=kt, v_type=vt), fill=_padded))
    for d, n, n_kv, h, hk, kt, vt in PROMPT:
        out.append(OpCase("flash_attn_ext", f"prompt,k={kt.name},v={vt.name},D={d},N={n},n_kv={n_kv},H={h}/{hk}",
                          lambda ctx, c=(d, d, n, n_kv, h, hk, 1, F16, d ** -0.5, 0.0, 0.0), kt=kt, vt=vt: _flash(
                              ctx, *c, kv_type=kt, v_type=vt), fill=_causal, max_nmse=TC_NMSE))
    for d, n, n_kv, h, hk, kt, mh, kind in SPANS:
        out.append(OpCase("flash_attn_ext", f"spans={kind},kv={kt.name},D={d},N={n},n_kv={n_kv},H={h}/{hk},mask_heads={mh}",
                          lambda ctx, c=(d, d, n, n_kv, h, hk, 1, F16, d ** -0.5, 0.0, 0.0), kt=kt, mh=mh: _flash(
                              ctx, *c, kv_type=kt, mask_heads=mh), fill=_spans(kind),
                          max_nmse=TC_NMSE if n >= 16 else 1e-7))
    for t in (F16, Q8_0):
        out.append(OpCase("flash_attn_ext", f"perf,token,kv={t.name},n_kv=4096", lambda ctx, t=t: _flash(
            ctx, 64, 64, 1, 4096, 9, 3, 1, F16, 0.125, 0.0, 0.0, kv_type=t), fill=_padded, tags=("perf",)))
    for d, n_kv, h, hk, wt, m in HANDOFF:
        out.append(OpCase("add", f"fused,flash_attn+mul_mat+add,w={wt.name},D={d},n_kv={n_kv},H={h}/{hk},M={m}",
                          lambda ctx, c=(d, n_kv, h, hk, wt, m): _attention_output(ctx, *c), fill=_padded,
                          reference=evaluate, max_nmse=DECODE_Q8_NMSE))
    out.append(OpCase("flash_attn_ext", "perf,token,n_kv=4096,H=32/8", lambda ctx: _flash(
        ctx, 64, 64, 1, 4096, 32, 8, 1, F16, 0.125, 0.0, 0.0), fill=_causal, tags=("perf",)))
    return out
