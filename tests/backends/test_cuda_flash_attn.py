"""flash_attn_ext on CUDA (kernels/attention_flash.py) as a llama graph runs it: the new K and V rows written into an
F16 (or F32) cache by set_rows, the attention reading the cache's first n_kv rows through views, grouped-query heads,
a causal mask; the flash path and the mul_mat -> soft_max -> mul_mat path (V seen transposed) each against a float64
reference on the cache's stored values. Which kernels a node gets (keys split for a generated token, tensor cores for a
prompt's and a token's F16 K/V) is checked without a GPU; the runs skip without one."""
from types import SimpleNamespace

import numpy as np
import pytest

import ggpy
from ggpy.backends.cuda import CUDABackend
from ggpy.backends.cuda.kernels import attention, attention_flash, quant
from ggpy.test_backend_ops.cases.attention import HANDOFF
from ggpy.types import F16, F32, Q8_0

HD, HEADS, KV_HEADS = 64, 8, 2


def _node(n, n_kv, hd=HD, kv_type=F16, heads=HEADS, kv_heads=KV_HEADS):
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (hd, n, heads, 1))
    k, v = (ctx.new_tensor(kv_type, (hd, n_kv, kv_heads, 1)) for _ in range(2))
    return ggpy.flash_attn_ext(q, k, v, ctx.new_tensor(F16, (n_kv, n)), 0.125)


def test_a_token_splits_the_keys_and_a_prompt_runs_on_tensor_cores():
    token = _node(1, 4096, heads=32, kv_heads=8)
    rb, z, chunk, chunks = attention_flash.split(token)
    assert (rb, z) == (2, 2) and chunks > 8 and chunk % 64 == 0 and chunk * (chunks - 1) < 4096   # 2 pairs: one row
    assert attention_flash.choose(token, None) == "dec"         # F16 K and V: tensor cores, 16 keys a warp
    assert attention_flash.dec_split(token) == (1, 128, 32) and attention_flash.kernel_name(token, "dec") == \
        "fa_dec_d64_f16_f16"
    assert attention_flash.dec_split(_node(1, 6000, heads=32, kv_heads=2)) == (2, 256, 24)    # 16 pairs, 2 steps a warp
    assert attention_flash.dec_split(_node(1, 40, heads=9, kv_heads=3)) == (1, 128, 1)
    assert attention_flash.temp_size(token, "dec", None) == max(32 * 32, 32 * chunks) * (64 + 2) * 4
    assert attention_flash.choose(_node(1, 4096, kv_type=F32), None) == "vec"
    assert attention_flash.choose(_node(1, 4096, hd=256), None) == attention_flash.choose(_node(1, 4096, hd=128), None) \
        == "vec"
    assert attention_flash.temp_size(token, "vec", None) == 32 * chunks * (64 + 2) * 4
    assert attention_flash.kernel_name(token, "vec") == "fa_vec_d64_r2_f16_f16"
    assert attention_flash.split(_node(3, 4096, heads=32, kv_heads=8))[:2] == (8, 2)      # several rows: 8 a block
    assert attention_flash.split(_node(1, 4096, heads=9, kv_heads=3))[:2] == (1, 3)       # groups of 3: 1 pair a block
    prompt = _node(100, 300)
    assert attention_flash.choose(prompt, None) == "tc" and attention_flash.temp_size(prompt, "tc", None) == 0
    assert attention_flash.choose(_node(100, 300, kv_type=F32), None) == "vec"
    assert "head dims" in attention.flash_attn_refusal(_node(1, 64, hd=80))
    assert attention_flash.kernel_names() >= {"fa_vec_d128_r8_q8_0_f16", "fa_combine_d64", "fa_mma_d128_q8_0_q8_0",
                                              "fa_vec_d64_r4_q8_0_q8_0_cl"}
    hopper = SimpleNamespace(device=SimpleNamespace(cc=(9, 0)))      # clusters of CLUSTER chunks, no partials
    short = _node(1, 1024, heads=32, kv_heads=8)
    assert attention_flash.split(short, hopper) == (2, 2, 1024 // attention_flash.CLUSTER, attention_flash.CLUSTER)
    assert attention_flash.kernel_name(short, "vec", hopper) == "fa_vec_d64_r2_f16_f16_cl"
    assert attention_flash.temp_size(short, "vec", hopper) == 0
    few = _node(1, 1000, heads=32, kv_heads=8)                      # fa_dec_k: a cluster of CLUSTER chunks
    assert attention_flash.dec_split(few, hopper) == (1, 125, attention_flash.CLUSTER)
    assert attention_flash.kernel_name(few, "dec", hopper) == "fa_dec_d64_f16_f16_cl"
    assert attention_flash.temp_size(few, "dec", hopper) == 0 and attention_flash.temp_size(few, "dec", None) > 0
    assert attention_flash.kernel_name(_node(1, 9000, heads=32, kv_heads=8), "dec", hopper) == "fa_dec_d64_f16_f16"
    deep = _node(1, 4224, heads=32, kv_heads=8)                     # a cluster of 16 chunks, 3 steps of 16 keys a warp
    assert attention_flash.dec_split(deep, hopper) == (1, 264, 16)
    assert attention_flash.kernel_name(deep, "dec", hopper) == "fa_dec_d64_f16_f16_cl16"
    smol = _node(1, 1000, heads=9, kv_heads=3)                      # groups of 3 over a cluster's keys: vec
    assert attention_flash.choose(smol, hopper) == "vec" and attention_flash.choose(smol, None) == "dec"
    assert attention_flash.choose(_node(1, 4096, heads=9, kv_heads=3), hopper) == "dec"
    assert not attention_flash.clustered(token, hopper) and not attention_flash.clustered(short, None)
    mixed = ggpy.flash_attn_ext(*short.src[:2], _node(1, 1024, kv_type=Q8_0, heads=32, kv_heads=8).src[2],
                                short.src[3], 0.125)
    assert not attention_flash.clustered(mixed, hopper) and attention_flash.clustered(short, hopper)
    gemma = _node(2, 4096, hd=256, kv_type=Q8_0, heads=8, kv_heads=2)     # 8 pairs a KV head: two blocks of 4
    assert attention_flash.split(gemma)[:2] == (4, 2) and attention_flash.choose(gemma, None) == "vec"
    assert attention_flash.kernel_name(gemma, "vec") == "fa_vec_d256_r4_q8_0_q8_0"
    assert attention_flash.kernel_name(_node(1, 300, hd=256, heads=4, kv_heads=1), "vec", hopper) == \
        "fa_vec_d256_r2_f16_f16_cl"
    assert attention_flash.kernel_name(_node(40, 300, hd=256), "tc") == "fa_mma_d256_f16_f16"
    assert "fa_vec_d256_r8_f16_f16" not in attention_flash.kernel_names()


def _run(backend, n, n_kv, flash: bool, cache_type, mask_type, seed: int):
    """(output (n, HEADS, HD), float64 reference): n new tokens at positions n_kv - n .. n_kv - 1 of a cache of
    n_kv + 5 rows whose first n_kv - n rows hold earlier tokens."""
    ctx = ggpy.Context()
    n_ctx, width = n_kv + 5, HD * KV_HEADS
    caches = [ctx.new_tensor(cache_type, (width, n_ctx)).set_input() for _ in range(2)]
    new = [ctx.new_tensor(F32, (width, n)).set_input() for _ in range(2)]
    pos = ctx.new_tensor(ggpy.I32, (n,)).set_input()
    qin = ctx.new_tensor(F32, (HD, HEADS, n)).set_input()
    mask = ctx.new_tensor(mask_type, (n_kv, n)).set_input()
    kc, vc = (ggpy.set_rows(c, x, pos) for c, x in zip(caches, new))
    k = ggpy.view_3d(kc, HD, n_kv, KV_HEADS, kc.nb[1], HD * kc.nb[0])
    v = ggpy.view_3d(vc, HD, n_kv, KV_HEADS, vc.nb[1], HD * vc.nb[0])
    q = ggpy.permute(qin, 0, 2, 1, 3)
    if flash:
        out = ggpy.flash_attn_ext(q, k, v, mask, 0.125)
    else:
        kq = ggpy.soft_max_ext(ggpy.mul_mat(k, q), mask, 0.125)
        out = ggpy.cont(ggpy.permute(ggpy.mul_mat(ggpy.permute(v, 1, 0, 2, 3), kq), 0, 2, 1, 3))
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(seed)
    dt = np.float16 if cache_type == F16 else np.float32
    cache_vals = [rng.uniform(-1, 1, (n_ctx, width)).astype(dt) for _ in range(2)]
    new_vals = [rng.uniform(-1, 1, (n, width)).astype(np.float32) for _ in range(2)]
    q_vals = rng.uniform(-1, 1, (n, HEADS, HD)).astype(np.float32)
    rows = np.arange(n_kv - n, n_kv, dtype=np.int32)
    i, j = np.indices((n, n_kv))
    m = np.where(j <= n_kv - n + i, 0.0, -np.inf)
    if flash and n > 1:
        m[1] = -np.inf          # a fully masked row: zeros (soft_max would give nan)
    mdt = np.float16 if mask_type == F16 else np.float32
    for t, x in zip(caches + new + [pos, qin, mask], cache_vals + new_vals + [rows, q_vals, m.astype(mdt)]):
        t.set(np.reshape(x, tuple(reversed(t.ne))))
    backend.compute(graph)
    kv = []
    for c, x in zip(cache_vals, new_vals):
        c = c.copy()
        c[rows] = x.astype(dt)
        kv.append(c[:n_kv].astype(np.float64).reshape(n_kv, KV_HEADS, HD))
    s = np.einsum("nhd,jhd->nhj", q_vals.astype(np.float64), np.repeat(kv[0], HEADS // KV_HEADS, 1)) * 0.125
    s = s + m[:, None, :]
    mx = s.max(-1, keepdims=True)
    p = np.where(np.isfinite(mx), np.exp(s - np.where(np.isfinite(mx), mx, 0)), 0.0)
    total = p.sum(-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    ref = np.einsum("nhj,jhd->nhd", p, np.repeat(kv[1], HEADS // KV_HEADS, 1))
    return out.numpy().reshape(n, HEADS, HD), ref


@pytest.mark.parametrize("cache_type", [F16, F32], ids=["f16", "f32"])
@pytest.mark.parametrize("flash", [True, False], ids=["flash", "mul_mat"])
@pytest.mark.parametrize("n,n_kv", [(1, 37), (1, 4096), (3, 1000), (40, 300)])
def test_cuda_attention_over_a_cache(cuda_backend, n, n_kv, flash, cache_type):
    out, ref = _run(cuda_backend, n, n_kv, flash, cache_type, F16 if n_kv % 2 else F32, seed=n + n_kv)
    exact = flash and cache_type == F32     # F32 math throughout (vec)
    tol = 2e-5 if exact else 3e-3     # else q and P (tensor cores) or cuBLASLt's operands rounded to F16
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    if flash and n > 1:
        assert not out[1].any()


def _q8_0(rng, shape):
    """(Q8_0 blocks as bytes, their values in float64) of random values of numpy shape `shape`."""
    d = rng.uniform(0.004, 0.012, shape[:-1] + (shape[-1] // 32, 1)).astype(np.float16)
    qs = rng.integers(-127, 128, shape[:-1] + (shape[-1] // 32, 32)).astype(np.int8)
    return np.concatenate([d.view(np.uint8), qs.view(np.uint8)], -1).reshape(-1), (d * qs.astype(np.float64)).reshape(shape)


def _reference(q, k, v, mask, scale, max_bias, softcap):
    """ggml's flash_attn_ext in float64: q (S, H, N, D), k and v (Sk, Hk, n_kv, D), mask (Mw, Mh, rows, n_kv) or None
    -> (S, N, H, Dv); a row whose scores are all -inf gives zeros."""
    s_, h_, n = q.shape[:3]
    hs, ss = np.arange(h_), np.arange(s_)
    kk, vv = (x[ss // (s_ // x.shape[0])][:, hs // (h_ // x.shape[1])] for x in (k, v))
    x = np.einsum("shnd,shjd->shnj", q, kk) * (scale / softcap if softcap else scale)
    x = softcap * np.tanh(x) if softcap else x
    if mask is not None:
        nlog2 = 2 ** int(np.floor(np.log2(h_)))
        m0, m1 = 2.0 ** (-max_bias / nlog2), 2.0 ** (-max_bias / 2 / nlog2)
        slope = np.where(hs < nlog2, m0 ** (hs + 1), m1 ** (2 * (hs - nlog2) + 1)) if max_bias else np.ones(h_)
        mk = mask[ss % mask.shape[0]][:, hs % mask.shape[1], :n]
        x = x + np.where(np.isinf(mk), -np.inf, slope[None, :, None, None] * mk)
    mx = x.max(-1, keepdims=True)
    p = np.exp(x - np.where(np.isfinite(mx), mx, 0))
    total = p.sum(-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return np.einsum("shnj,shjd->snhd", p, vv)


TC_CASES = [  # D, n, n_kv, H, Hk, S, Sk, K type, V type, mask (type, Mh, Mw), max_bias, softcap, K 8-byte aligned
    (64, 40, 1000, 9, 3, 1, 1, F16, F16, (F16, 1, 1), 0.0, 0.0, False),
    (128, 64, 2100, 32, 8, 1, 1, F16, F16, (F32, 1, 1), 0.0, 0.0, False),
    (128, 33, 300, 8, 2, 2, 1, Q8_0, F16, (F32, 2, 2), 8.0, 0.0, False),
    (64, 17, 77, 4, 4, 1, 1, F16, Q8_0, None, 0.0, 30.0, True),
    (64, 100, 1500, 12, 3, 1, 1, Q8_0, Q8_0, (F16, 1, 1), 0.0, 0.0, False),
    (256, 40, 700, 4, 1, 1, 1, F16, F16, (F16, 1, 1), 0.0, 50.0, False),      # Gemma-2/3: heads of 256, softcap
    (256, 70, 1100, 8, 2, 1, 1, F16, Q8_0, (F32, 1, 1), 0.0, 0.0, True),
    (256, 17, 100, 4, 4, 2, 1, Q8_0, Q8_0, (F16, 2, 2), 8.0, 0.0, False),
]


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: f"D{c[0]}-n{c[1]}-kv{c[2]}-H{c[3]}/{c[4]}-{c[7].name}"
                         f"-{c[8].name}-bias{c[10]}-cap{c[11]}")
def test_cuda_flash_attn_tensor_cores_vs_float64(cuda_backend, case):
    """fa_mma_k (with its key chunks merged where split) against float64: grouped-query heads, Q8_0 K or V, a mask of
    random values and -inf (a fully masked row), per-head and per-sequence masks with ALiBi, softcap, K/V sequences
    broadcast, keys not a multiple of 64, K rows aligned to 8 bytes only (a view at an offset)."""
    d, n, n_kv, h, hk, s, sk, kt, vt, mask_of, max_bias, softcap, offset = case
    rng = np.random.default_rng(n + n_kv)
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (d, n, h, s)).set_input()
    kin = ctx.new_tensor(kt, (d + (4 if offset else 0), n_kv, hk, sk)).set_input()
    k = ggpy.view_4d(kin, d, n_kv, hk, sk, kin.nb[1], kin.nb[2], kin.nb[3], 8 if offset else 0)
    v = ctx.new_tensor(vt, (d, n_kv, hk, sk)).set_input()
    mask = ctx.new_tensor(mask_of[0], (n_kv, n + 3, *mask_of[1:])).set_input() if mask_of else None
    out = ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5, max_bias, softcap)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    assert attention_flash.choose(out, cuda_backend) == "tc"
    qv = rng.uniform(-1, 1, (s, h, n, d))
    kv = []
    for t in (kin, v):
        if t.type == Q8_0:
            raw, vals = _q8_0(rng, tuple(reversed(t.ne)))
            t.set(raw)
        else:
            vals = rng.uniform(-1, 1, tuple(reversed(t.ne))).astype(np.float16)
            t.set(vals)
        kv.append(vals.astype(np.float64)[..., 4:] if t is kin and offset else vals.astype(np.float64))
    q.set(qv.astype(np.float32))
    mv = None
    if mask is not None:
        mv = rng.uniform(-2, 0, tuple(reversed(mask.ne)))
        i, j = np.indices(mv.shape[2:])
        mv[..., j > n_kv - n + i] = -np.inf
        mv[..., 1, :] = -np.inf
        mv = mv.astype(np.float16 if mask.type == F16 else np.float32)
        mask.set(mv)
        mv = mv.astype(np.float64)
    cuda_backend.compute(graph)
    ref = _reference(qv.astype(np.float32).astype(np.float64), *kv, mv, d ** -0.5, max_bias, softcap)
    got = out.numpy().reshape(ref.shape)
    np.testing.assert_allclose(got, ref, rtol=4e-3, atol=4e-3)
    if mask is not None:
        assert not got[:, 1].any()


DEC_CASES = [  # D, n, n_kv, H, Hk, S, Sk, mask (type, Mh, Mw), max_bias, softcap, K at a byte offset of its row
    (64, 1, 4096, 32, 8, 1, 1, (F16, 1, 1), 0.0, 0.0, 0),        # a 1B token: 32 chunks of 16 keys a warp
    (64, 1, 6000, 32, 2, 1, 1, (F32, 1, 1), 0.0, 0.0, 0),        # 16 pairs: two blocks of them, 2 steps a warp
    (64, 3, 333, 9, 3, 2, 1, (F16, 3, 2), 8.0, 0.0, 0),          # ALiBi, per-head and per-sequence masks, K/V broadcast
    (64, 2, 1000, 8, 2, 1, 1, (F16, 1, 1), 0.0, 30.0, 16),       # softcap, K rows at a 16-byte offset
    (64, 1, 77, 4, 4, 1, 1, None, 0.0, 0.0, 0),                  # no mask, one chunk, keys not a multiple of 16
    (64, 2, 500, 8, 2, 1, 1, (F32, 1, 1), 0.0, 0.0, 8),          # K at 8 bytes past 16: runs on vec instead
]


@pytest.mark.parametrize("clusters", [((1 << 30, 8),), ((1 << 30, 16),), ()], ids=["cluster", "cluster16", "global"])
@pytest.mark.parametrize("case", DEC_CASES, ids=lambda c: f"D{c[0]}-n{c[1]}-kv{c[2]}-H{c[3]}/{c[4]}-S{c[5]}/{c[6]}"
                         f"-bias{c[8]}-cap{c[9]}-off{c[10]}")
def test_cuda_flash_attn_decode_tensor_cores_vs_float64(dec_backend, case, clusters, monkeypatch):
    """fa_dec_k (F16 K and V, a few query rows) against float64, its chunks merged in a cluster's shared memory (sm_90
    on: 8 or 16 blocks, whatever the keys) or through memory: grouped-query heads, more pairs than a block takes, more
    keys than 16 a warp, a mask of random values and -inf (a fully masked row), per-head and per-sequence masks with
    ALiBi, softcap, K/V sequences broadcast; a K not 16-byte aligned runs fa_vec_k."""
    d, n, n_kv, h, hk, s, sk, mask_of, max_bias, softcap, offset = case
    monkeypatch.setattr(attention_flash, "DEC_CLUSTERS", clusters)
    rng = np.random.default_rng(n * n_kv + d)
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (d, n, h, s)).set_input()
    pad = 8 if offset else 0                            # halves of padding a K row
    kin = ctx.new_tensor(F16, (d + pad, n_kv, hk, sk)).set_input()
    k = ggpy.view_4d(kin, d, n_kv, hk, sk, kin.nb[1], kin.nb[2], kin.nb[3], offset)
    v = ctx.new_tensor(F16, (d, n_kv, hk, sk)).set_input()
    mask = ctx.new_tensor(mask_of[0], (n_kv, n + 3, *mask_of[1:])).set_input() if mask_of else None
    out = ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5, max_bias, softcap)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(dec_backend).alloc_graph(graph)
    assert dec_backend.impl_for(out) == "dec"
    kvals = rng.uniform(-1, 1, tuple(reversed(kin.ne))).astype(np.float16)
    vvals = rng.uniform(-1, 1, tuple(reversed(v.ne))).astype(np.float16)
    kin.set(kvals)
    v.set(vvals)
    qv = rng.uniform(-1, 1, (s, h, n, d)).astype(np.float32)
    q.set(qv)
    mv = None
    if mask is not None:
        mv = rng.uniform(-2, 0, tuple(reversed(mask.ne)))
        mv[..., :, n_kv - 7:] = -np.inf
        if n > 1:
            mv[..., 1, :] = -np.inf
        mv = mv.astype(np.float16 if mask.type == F16 else np.float32)
        mask.set(mv)
        mv = mv.astype(np.float64)
    dec_backend.compute(graph)
    kref = kvals.astype(np.float64)[..., offset // 2:offset // 2 + d]
    ref = _reference(qv.astype(np.float64), kref, vvals.astype(np.float64), mv, d ** -0.5, max_bias, softcap)
    got = out.numpy().reshape(ref.shape)
    tol = 2e-5 if offset % 16 else 3e-3             # vec's F32 math, else q and P rounded to F16
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    if mask is not None and n > 1:
        assert not got[:, 1].any()


VEC_CASES = [  # D, n, n_kv (keys in use: the rest masked -inf), H, Hk, K and V type
    (64, 1, 256, 256, 9, 3, F16), (64, 1, 576, 513, 9, 3, Q8_0), (64, 1, 4096, 4000, 32, 8, F16),
    (64, 2, 768, 700, 32, 8, F32), (128, 1, 576, 513, 32, 8, Q8_0), (128, 3, 4096, 4096, 8, 2, F16),
    (64, 1, 6000, 5900, 9, 3, F16), (64, 1, 40, 33, 4, 1, Q8_0), (64, 1, 1536, 1500, 9, 3, F16),
    (256, 1, 384, 380, 4, 1, F16), (256, 1, 4096, 4000, 4, 1, Q8_0), (256, 3, 700, 650, 8, 2, F32),
]


@pytest.fixture(scope="module")
def vec_backend(cuda_backend):
    """A CUDA backend running every flash_attn_ext on fa_vec_k."""
    return CUDABackend("cuda", force={"flash_attn_ext": "vec"})


@pytest.fixture(scope="module")
def dec_backend(cuda_backend):
    """A CUDA backend running flash_attn_ext on fa_dec_k where it can."""
    return CUDABackend("cuda", force={"flash_attn_ext": ("dec", "vec")})


@pytest.mark.parametrize("impl", ["cluster", "global", "dec"])
@pytest.mark.parametrize("case", VEC_CASES, ids=lambda c: f"D{c[0]}-n{c[1]}-kv{c[2]}/{c[3]}-H{c[4]}/{c[5]}-{c[6].name}")
def test_cuda_flash_attn_decode_vs_float64(dec_backend, vec_backend, case, impl, monkeypatch):
    """fa_vec_k for a few query rows against float64, its chunks merged in a cluster's shared memory (sm_90 on, at
    most CLUSTER_MAX_KEYS keys) or through memory (partials and arrival counters), and fa_dec_k where it runs (F16):
    the model's cache layout (heads interleaved in a row), a padded tail masked -inf, grouped-query heads."""
    d, n, n_kv, used, h, hk, t = case
    cluster = impl == "cluster"
    if impl == "global":
        monkeypatch.setattr(attention_flash, "CLUSTER_MAX_KEYS", dict.fromkeys(attention_flash.HEAD_DIMS, 0))
    if impl == "dec" and (t != F16 or d not in attention_flash.DEC_DIMS):
        pytest.skip("fa_dec_k takes F16 K and V, heads of 64")
    backend = dec_backend if impl == "dec" else vec_backend
    rng = np.random.default_rng(n_kv + h)
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (d, n, h)).set_input()
    caches = [ctx.new_tensor(t, (d * hk, n_kv)).set_input() for _ in range(2)]
    k, v = (ggpy.view_3d(c, d, n_kv, hk, c.nb[1], c.nb[1] // hk) for c in caches)
    mask = ctx.new_tensor(F16, (n_kv, n)).set_input()
    out = ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    if impl != "dec":
        assert attention_flash.clustered(out, backend) == (cluster and backend.device.cc >= (9, 0)
                                                           and n_kv <= attention_flash.CLUSTER_MAX_KEYS[d])
    assert backend.impl_for(out) == ("dec" if impl == "dec" else "vec")
    kv = []
    for c in caches:
        if t == Q8_0:
            raw, vals = _q8_0(rng, (n_kv, d * hk))
            c.set(raw)
        else:
            vals = rng.uniform(-1, 1, (n_kv, d * hk)).astype(np.float16 if t == F16 else np.float32)
            c.set(vals)
        kv.append(vals.astype(np.float64).reshape(1, n_kv, hk, d).transpose(0, 2, 1, 3))
    qv = rng.uniform(-1, 1, (1, h, n, d)).astype(np.float32)
    q.set(qv)
    mv = np.where(np.arange(n_kv) < used, rng.uniform(-1, 0, (n, n_kv)), -np.inf).astype(np.float16)
    mask.set(mv.reshape(1, 1, n, n_kv))
    backend.compute(graph)
    ref = _reference(qv.astype(np.float64), *kv, mv.astype(np.float64)[None, None], d ** -0.5, 0.0, 0.0)
    tol = 3e-3 if impl == "dec" else 2e-5       # dec: q and P rounded to F16
    np.testing.assert_allclose(out.numpy().reshape(ref.shape), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("softcap", [0.0, 50.0], ids=["nocap", "cap50"])
@pytest.mark.parametrize("kv_type", [F16, Q8_0], ids=["f16", "q8_0"])
@pytest.mark.parametrize("n,n_kv", [(1, 300), (1, 4096), (2, 1500), (64, 1200), (20, 1500)])
def test_cuda_flash_attn_heads_of_256_sliding_window_vs_float64(cuda_backend, n, n_kv, kv_type, softcap):
    """Gemma-2/3's attention: heads of 256 (4 query heads a KV head), the sliding window's mask (query at position p
    sees keys p - 511 .. p; the padded tail -inf; F16, or F32 for 1500 keys), the logit softcap, over the model's cache
    layout: a generated token or two on fa_vec_k (in a cluster for 300 keys on sm_90), a prompt chunk on fa_mma_k (both
    read only the keys the mask leaves), against float64."""
    d, h, hk, window = 256, 8, 2, 512
    rng = np.random.default_rng(n * n_kv + int(softcap))
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (d, n, h)).set_input()
    caches = [ctx.new_tensor(kv_type, (d * hk, n_kv)).set_input() for _ in range(2)]
    k, v = (ggpy.view_3d(c, d, n_kv, hk, c.nb[1], c.nb[1] // hk) for c in caches)
    mask = ctx.new_tensor(F32 if n_kv == 1500 else F16, (n_kv, n)).set_input()
    out = ggpy.flash_attn_ext(q, k, v, mask, 1.0 / 16, 0.0, softcap)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    assert attention_flash.choose(out, cuda_backend) == ("tc" if n >= attention_flash.TC_MIN_N else "vec")
    kv = []
    for c in caches:
        if kv_type == Q8_0:
            raw, vals = _q8_0(rng, (n_kv, d * hk))
            c.set(raw)
        else:
            vals = rng.uniform(-1, 1, (n_kv, d * hk)).astype(np.float16)
            c.set(vals)
        kv.append(vals.astype(np.float64).reshape(1, n_kv, hk, d).transpose(0, 2, 1, 3))
    qv = rng.uniform(-2, 2, (1, h, n, d)).astype(np.float32)
    q.set(qv)
    pos = n_kv - 20 - n + np.arange(n)[:, None]         # the last 20 rows: padding
    j = np.arange(n_kv)[None, :]
    mv = np.where((j <= pos) & (j > pos - window), 0.0, -np.inf).astype(np.float16 if mask.type == F16 else np.float32)
    mask.set(mv.reshape(1, 1, n, n_kv))
    cuda_backend.compute(graph)
    ref = _reference(qv.astype(np.float64), *kv, mv.astype(np.float64)[None, None], 1.0 / 16, 0.0, softcap)
    tol = 4e-3 if n >= attention_flash.TC_MIN_N else 2e-5
    np.testing.assert_allclose(out.numpy().reshape(ref.shape), ref, rtol=tol, atol=tol)


def _o_projection(backend, case, seed: int):
    """(r + W . attention output for one token, the program's kernel names) of test-backend-ops' hand-off case."""
    from ggpy.test_backend_ops.cases import attention as cases
    from ggpy.test_backend_ops.harness import default_fill

    ctx = ggpy.Context()
    out = cases._attention_output(ctx, *case).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(seed)
    for leaf in graph.leafs:
        values = cases._padded(rng, leaf)
        leaf.set(default_fill(rng, leaf) if values is None else values)
    backend.compute(graph)
    return out.numpy().copy(), [s.name for s in backend.program(graph)]


@pytest.mark.parametrize("case", HANDOFF, ids=lambda c: f"D{c[0]}-kv{c[1]}-H{c[2]}/{c[3]}-{c[4].name}-M{c[5]}")
def test_a_tokens_attention_hands_its_output_to_the_o_projection_as_q8_1(cuda_backend, case):
    """The clustered decode attention writes its output as the q8_1 blocks the o projection's two-launch mmvq reads
    (kernels/handoff.py): no quantize_q8_1 launch, the same sums as the unfused backend's (fuse=False: F32 output,
    then quantize_q8_1); SmolLM2's one-launch product (b quantized by its blocks) keeps its F32 input."""
    fused, names = _o_projection(CUDABackend("cuda"), case, 5)
    plain, plain_names = _o_projection(CUDABackend("cuda", fuse=False), case, 5)
    handed = case[2] * case[0] > quant.MMVQ_SHARED_MAX_K
    quantizes = ("quantize_q8_1_f32" in names, "quantize_q8_1_f32" in plain_names)
    assert quantizes == ((False, True) if handed else (False, False)), (names, plain_names)
    assert np.allclose(fused, plain, rtol=1e-5, atol=1e-5), np.abs(fused - plain).max()
