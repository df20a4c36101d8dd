"""flash_attn_ext on CUDA (kernels/attention_flash.py) as a llama graph runs it: the new K and V rows written into an
F16 (or F32) cache by set_rows, the attention reading the cache's first n_kv rows through views, grouped-query heads,
a causal mask; the flash path and the mul_mat -> soft_max -> mul_mat path (V seen transposed) each against a float64
reference on the cache's stored values. Which kernels a node gets (keys split for a generated token, tensor cores for a
prompt's F16 K/V) is checked without a GPU; the runs skip without one."""
import numpy as np
import pytest

import ggpy
from ggpy.backends.cuda.kernels import attention, attention_flash
from ggpy.types import F16, F32

HD, HEADS, KV_HEADS = 64, 8, 2


def _node(n, n_kv, hd=HD, kv_type=F16, heads=HEADS, kv_heads=KV_HEADS):
    ctx = ggpy.Context()
    q = ctx.new_tensor(F32, (hd, n, heads, 1))
    k, v = (ctx.new_tensor(kv_type, (hd, n_kv, kv_heads, 1)) for _ in range(2))
    return ggpy.flash_attn_ext(q, k, v, ctx.new_tensor(F16, (n_kv, n)), 0.125)


def test_a_token_splits_the_keys_and_a_prompt_runs_on_tensor_cores():
    token = _node(1, 4096, heads=32, kv_heads=8)
    rb, z, chunk, chunks = attention_flash.split(token)
    assert (rb, z) == (4, 1) and chunks > 8 and chunk % attention_flash.TILE == 0 and chunk * (chunks - 1) < 4096
    assert attention_flash.choose(token, None) == "vec"
    assert attention_flash.temp_size(token, "vec", None) == 32 * chunks * (64 + 2) * 4
    assert attention_flash.kernel_name(token, "vec") == "fa_vec_d64_r4_f16_f16"
    prompt = _node(100, 300)
    assert attention_flash.choose(prompt, None) == "tc" and attention_flash.temp_size(prompt, "tc", None) == 0
    assert attention_flash.choose(_node(100, 300, kv_type=F32), None) == "vec"
    assert "head dims" in attention.flash_attn_refusal(_node(1, 64, hd=80))
    assert attention_flash.kernel_names() >= {"fa_vec_d128_r8_q8_0_f16", "fa_combine_d64", "fa_tc_d128_q8_0_q8_0"}


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
    exact = flash and not (cache_type == F16 and n >= attention_flash.TC_MIN_N)     # F32 math throughout
    tol = 2e-5 if exact else 3e-3     # else q and P (tensor cores) or cuBLASLt's operands rounded to F16
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    if flash and n > 1:
        assert not out[1].any()
