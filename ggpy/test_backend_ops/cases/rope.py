"""Cases for rope: normal and NEOX pairs, partial rotation (n_dims < ne[0], odd ne[0]), frequency factors, freq_base
and freq_scale, YaRN (ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig), strided a, F16 and BF16."""
from __future__ import annotations

from itertools import product

from ... import ops
from ...types import BF16, F16, F32, I32, Q4_1, Q4_K, Q6_K, Q8_0
from ..harness import OpCase
from ..references import evaluate
from .matmul import DECODE_Q8_NMSE
from .util import LAYOUTS, leaf, layout

SHAPES = [  # (a.ne, n_dims)
    ((64, 9, 7, 1), 64),
    ((128, 4, 3, 2), 128),
    ((10, 3, 5, 1), 10),
    ((80, 2, 4, 1), 32),
    ((33, 2, 3, 2), 16),
    ((2, 1, 1, 1), 2),
    ((64, 7, 151, 1), 64),      # two CPU workers, split inside a token's heads
]
YARN = [  # (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig)
    (10000.0, 1.0, 0.0, 1.0, 32.0, 1.0, 4096),
    (1e5, 0.25, 1.0, 1.0, 32.0, 1.0, 4096),
    (5e5, 0.5, 0.5, 0.8, 16.0, 2.0, 2048),
    (1e4, 0.125, 1.0, 1.0, 32.0, 1.0, 64),
    (1e4, 2.0, 0.0, 0.7, 32.0, 1.0, 0),
]


def _fill(rng, t):
    """Positions in [-8, 3000) for the I32 leaf, frequency factors in [0.5, 4) for the leaf named 'ff'."""
    shape = tuple(reversed(t.ne))
    if t.type == I32:
        return rng.integers(-8, 3000, size=shape)
    if t.name == "ff":
        return rng.uniform(0.5, 4.0, size=shape)
    return rng.uniform(-1.0, 1.0, size=shape)


def _rope(ctx, t, ne, n_dims, mode, yarn=YARN[0], ff=False, how="cont"):
    a = layout(ctx, t, ne, how)
    c = leaf(ctx, F32, (n_dims // 2 + 3,)).set_name("ff") if ff else None
    base, scale, ext, attn, fast, slow, n_ctx = yarn
    return ops.rope_ext(a, leaf(ctx, I32, (ne[2],)), c, n_dims, mode, n_ctx, base, scale, ext, attn, fast, slow)


def cases():
    out = []
    for mode in (0, 2):
        for t in (F32, F16, BF16):
            for ne, n_dims in SHAPES:
                out.append(OpCase("rope", f"{t.name},mode={mode},ne={ne},n_dims={n_dims}", lambda ctx, t=t, ne=ne,
                                  n=n_dims, m=mode: _rope(ctx, t, ne, n, m), fill=_fill))
        for yarn in YARN:
            for ff in (False, True):
                out.append(OpCase("rope", f"f32,mode={mode},yarn={yarn},ff={ff}", lambda ctx, m=mode, y=yarn, ff=ff:
                                  _rope(ctx, F32, (96, 5, 6, 1), 64, m, y, ff), fill=_fill))
        for how in LAYOUTS[1:]:
            out.append(OpCase("rope", f"f32,mode={mode},{how}", lambda ctx, m=mode, how=how: _rope(
                ctx, F32, (24, 6, 5, 2), 16, m, YARN[1], True, how), fill=_fill))
        out.append(OpCase("rope", f"f32,ggml_rope,mode={mode}", lambda ctx, m=mode: ops.rope(
            leaf(ctx, F32, (64, 4, 9)), leaf(ctx, I32, (9,)), 48, m), fill=_fill))
    out.append(OpCase("rope", "f32,perf,ne=(64,9,512,1)", lambda ctx: _rope(ctx, F32, (64, 9, 512, 1), 64, 0),
                      fill=_fill, tags=("perf",)))
    return out + set_rows_cases()


def _kv_fill(n_rows: int):
    """Distinct row indices in [0, n_rows) for the leaf named 'idx' (also the positions when the rope reads it),
    the harness's random blocks for a quantized cache, else _fill's values."""
    def fill(rng, t):
        if t.name == "idx":
            return rng.permutation(n_rows)[:t.ne[0]].astype("int32")
        return None if t.type.quantized else _fill(rng, t)
    return fill


def _rope_set_rows(ctx, t, cache_t, ne, n_dims, mode, n_rows, own_pos, ff):
    """rope(a ne = (hd, heads, n)) -> reshape_2d -> set_rows into a cache (hd * heads, n_rows) of cache_t at the
    indices 'idx' (the rope's positions too, as a llama graph's, unless own_pos): the rope_set_rows pattern."""
    hd, heads, n = ne
    idx = leaf(ctx, I32, (n,)).set_name("idx")
    pos = leaf(ctx, I32, (n,)) if own_pos else idx
    c = leaf(ctx, F32, (n_dims // 2,)).set_name("ff") if ff else None
    base, scale, ext, attn, fast, slow, n_ctx = YARN[1]
    r = ops.rope_ext(leaf(ctx, t, ne), pos, c, n_dims, mode, n_ctx, base, scale, ext, attn, fast, slow)
    return ops.set_rows(leaf(ctx, cache_t, (hd * heads, n_rows)), ops.reshape_2d(r, hd * heads, n), idx)


def set_rows_cases():
    """rope -> set_rows (a KV cache write): one token and a prompt, partial rotation, NEOX, frequency factors, F32 and
    F16 and Q8_0 caches; compared with every node's reference in turn (set_rows' reference rounds a Q8_0 row as gguf
    does: the fused write must give those blocks); the CPU runs the pattern as one kernel."""
    out = []
    for ne, n_dims, mode, own_pos, ff in (((64, 3, 1), 64, 0, False, False), ((64, 2, 5), 64, 2, True, True),
                                          ((32, 4, 7), 16, 0, True, False), ((64, 8, 130), 64, 2, False, True)):
        for t, cache_t in ((F32, F32), (F32, F16), (F16, F16), (F32, Q8_0)):
            n_rows = ne[2] + 9
            out.append(OpCase("set_rows", f"fused,rope+set_rows,{t.name}->{cache_t.name},ne={ne},n_dims={n_dims},"
                              f"mode={mode},pos={'own' if own_pos else 'idx'},ff={ff}", lambda ctx, t=t, ct=cache_t,
                              ne=ne, n=n_dims, m=mode, r=n_rows, p=own_pos, ff=ff: _rope_set_rows(ctx, t, ct, ne, n, m,
                                                                                                 r, p, ff),
                              fill=_kv_fill(n_rows), reference=evaluate, kernel="rope\\+set_rows"))
    for (hd, hq, hk, n), mode, cache_t in (((64, 9, 3, 1), 0, F16), ((64, 4, 2, 5), 2, F32), ((32, 6, 2, 3), 0, BF16)):
        out.append(OpCase("concat", f"fused,rope_kv,{cache_t.name},hd={hd},heads={hq}/{hk},n={n},mode={mode}", lambda ctx,
                          s=(hd, hq, hk, n), m=mode, ct=cache_t: _rope_kv(ctx, *s, m, ct), fill=_kv_fill(n + 9),
                          reference=evaluate, max_nmse=1e-5))
    for t, (hd, hq, hk, k, n_dims), mode, n in product((Q4_1, Q8_0, Q4_K), ((64, 9, 3, 576, 64), (128, 32, 8, 512, 128),
                                                                            (64, 4, 2, 256, 32)), (0, 2), (1, 3)):
        k -= k % t.block                # SmolLM2's 576 for 32-blocks, 512 for Q4_K's 256
        out.append(OpCase("concat", f"fused,norm+rope_kv,{t.name},hd={hd},n_dims={n_dims},heads={hq}/{hk},K={k},n={n},"
                          f"mode={mode}", lambda ctx, s=(hd, hq, hk, n), m=mode, w=(t, k, n_dims): _rope_kv(ctx, *s, m, F16, w),
                          fill=_kv_fill(n + 9), reference=evaluate, max_nmse=DECODE_Q8_NMSE))
    for t, n in product((Q4_K, Q6_K, Q8_0), (1, 3)):   # Llama-3.2-1B's q, k, v: too big to quantize x in each block
        out.append(OpCase("concat", f"fused,norm+rope_kv,{t.name},hd=64,n_dims=64,heads=32/8,K=2048,n={n},mode=0",
                          lambda ctx, n=n, t=t: _rope_kv(ctx, 64, 32, 8, n, 0, F16, (t, 2048, 64)),
                          fill=_kv_fill(n + 9), reference=evaluate, max_nmse=DECODE_Q8_NMSE))
    return out


def _rope_kv(ctx, hd, hq, hk, n, mode, cache_t, weights=None):
    """rope(q) and rope(k) at the positions 'idx', k and v written into caches of n + 9 rows at those rows (the rope_kv
    pattern): the q rope and both whole caches in one F32 vector. With weights = (type, K, n_dims): q, k and v the
    products of rms_norm(x ne (K, n)) * w by weights of that type (the norm_rope_kv pattern), the first n_dims of each
    head roped at positions of their own."""
    idx, ff = leaf(ctx, I32, (n,)).set_name("idx"), leaf(ctx, F32, (hd // 2,)).set_name("ff")
    if weights is None:
        pos, n_dims, (q, k, v) = idx, hd, (leaf(ctx, F32, (hd * h, n)) for h in (hq, hk, hk))
    else:
        t, k_in, n_dims = weights
        x = ops.mul(ops.rms_norm(leaf(ctx, F32, (k_in, n)), 1e-6), leaf(ctx, F32, (k_in,)))
        pos, (q, k, v) = leaf(ctx, I32, (n,)), (ops.mul_mat(leaf(ctx, t, (k_in, hd * h)), x) for h in (hq, hk, hk))
    q, k = (ops.rope_ext(ops.reshape_3d(y, hd, y.ne[0] // hd, n), pos, ff, n_dims, mode, 4096, *YARN[1][:2], 0.0, 1.0,
                         32.0, 1.0) for y in (q, k))
    kc, vc = (ops.set_rows(leaf(ctx, cache_t, (hd * hk, n + 9)), rows, idx) for rows in (ops.reshape_2d(k, hd * hk, n), v))
    parts = [ops.reshape_1d(q, q.nelements)] + [ops.reshape_1d(ops.cast(c, F32), c.nelements) for c in (kc, vc)]
    return ops.concat(ops.concat(parts[0], parts[1], 0), parts[2], 0)
