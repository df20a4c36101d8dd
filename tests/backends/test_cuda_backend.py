"""The CUDA backend on a GPU (its op cases run in test_backend_ops.py): mul_mat cases in TF32 with a looser
tolerance, GEMM planning and epilogues, host<->device round trips, the NVRTC disk cache, fusions, and its errors.
Skips where cuda-python or a GPU is missing (mul_mat tests where nvmath-python is)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.cases import matmul
from ggpy.test_backend_ops.harness import run_case

pytest.importorskip("cuda.bindings.driver")

from ggpy.backends.cuda import cublas  # noqa: E402
from ggpy.backends.cuda.kernels import elementwise  # noqa: E402


MUL_MAT = [c for c in matmul.cases() if "perf" not in c.tags]


@pytest.fixture(scope="module")
def blas_backend(cuda_backend):
    if cublas.MISSING:
        pytest.skip(cublas.MISSING)
    return cuda_backend


@pytest.fixture(scope="module")
def tf32_backend(blas_backend):
    return ggpy.backends.cuda.CUDABackend("cuda", allow_tf32=True)


@pytest.mark.parametrize("case", [c for c in MUL_MAT if c.params.lower().startswith(("f32,f32", "f32,a="))],
                         ids=lambda c: c.id)
def test_mul_mat_tf32(tf32_backend, case):
    result = run_case(dataclasses.replace(case, max_nmse=1e-5), tf32_backend)
    assert result.ok, f"{case.id}: {result.message}"


def test_mul_mat_plan(blas_backend):
    """One step per GEMM call, the workspace from the temp heap, a broadcast batch in one call."""
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32, 1, 1)).set_input()
    b = ctx.new_tensor(ggpy.F16, (64, 16, 4, 1)).set_input()
    y = ggpy.mul_mat(a, b)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    steps = blas_backend.program(graph)
    assert [s.name for s in steps] == ["copy_f16_f32", "cublaslt_f32_f16"] and len(steps[1].calls) == 1
    assert y.temp is not None and y.temp[2] == blas_backend.temp_size(y) > (32 << 20)


def _computed(cuda_backend, y, leafs, seed: int) -> list:
    """Plan y's graph on backend, fill `leafs` with seeded standard normal values, compute: its step names."""
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(seed)
    for t in leafs:
        t.set(rng.standard_normal(t.shape).astype(np.float32))
    cuda_backend.compute(graph)
    return [st.name for st in cuda_backend.program(graph)]


def _np_mul_mat(a, b):
    """ggml mul_mat on numpy arrays in reversed-ne order (dims 3, 2 of a broadcast over b's)."""
    r3, r2 = b.shape[0] // a.shape[0], b.shape[1] // a.shape[1]
    a = np.repeat(np.repeat(a, r3, axis=0), r2, axis=1)
    return np.einsum("...mk,...nk->...nm", a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (0, 1, 2, 3)], ids=["heads_permuted", "contiguous"])
def test_mul_mat_batches(blas_backend, perm):
    """Attention-like products over (heads, windows): few cuBLASLt calls (dims merged or the larger one
    batched), one GEMM over all rows for a single weight matrix; results as numpy's."""
    ctx = ggpy.Context()
    q = ctx.new_tensor(ggpy.F32, (16, 5, 49, 25)).set_input()       # (K, heads, tokens, windows) in memory
    k = ctx.new_tensor(ggpy.F32, (16, 5, 49, 25)).set_input()
    w = ctx.new_tensor(ggpy.F32, (16, 24)).set_input()
    qp, kp = ggpy.permute(q, *perm), ggpy.permute(k, *perm)         # perm (0, 2, 1, 3): ne = (16, 49, 5, 25)
    s = ggpy.mul_mat(kp, qp)
    y = ggpy.mul_mat(w, q)
    graph = ggpy.Graph()
    graph.build_forward_expand(s)
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(0)
    for t in (q, k, w):
        t.set(rng.standard_normal(t.shape).astype(np.float32))
    blas_backend.compute(graph)
    gemms = [st for st in blas_backend.program(graph) if st.name.startswith("cublaslt")]
    assert [len(g.calls) for g in gemms] == [5 if perm[1] == 2 else 1, 1]     # heads looped, windows batched
    qn, kn = (np.ascontiguousarray(np.transpose(t.numpy(), [3 - p for p in reversed(perm)])) for t in (q, k))
    assert np.allclose(s.numpy(), _np_mul_mat(kn, qn), atol=1e-4)
    assert np.allclose(y.numpy(), _np_mul_mat(w.numpy()[None, None], q.numpy()), atol=1e-4)


@pytest.mark.parametrize("act", [None, "gelu_erf"])
def test_mul_mat_bias_epilogue(blas_backend, act):
    """mul_mat + add(bias over ne[0]) is one GEMM with cuBLASLt's BIAS epilogue writing the add's memory."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (64, 40)).set_input()
    x = ctx.new_tensor(ggpy.F32, (64, 30, 3)).set_input()
    bias = ctx.new_tensor(ggpy.F32, (40,)).set_input()
    y = ggpy.add(ggpy.mul_mat(w, x), bias)
    if act:
        y = getattr(ggpy, act)(y)
    names = _computed(blas_backend, y, (w, x, bias), 1)
    assert names == ["cublaslt_f32_f32+bias"] + (["gelu_erf_c_f32"] if act else [])
    ref = _np_mul_mat(w.numpy()[None, None], x.numpy()[None]) + bias.numpy()
    if act:
        from math import erf
        ref = 0.5 * ref * (1 + np.vectorize(erf)(ref / np.sqrt(2)))
    assert np.allclose(y.numpy(), ref, atol=1e-4)


@pytest.mark.parametrize("type_", [ggpy.F32, ggpy.F16, ggpy.I32], ids=lambda t: t.name)
def test_round_trip(cuda_backend, type_):
    ctx = ggpy.Context()
    t = ctx.new_tensor(type_, (37, 5, 3))
    u = ctx.new_tensor(type_, (6, 4))
    ggpy.alloc_ctx_tensors(ctx, cuda_backend)
    rng = np.random.default_rng(0)
    values = rng.integers(-1000, 1000, size=t.shape).astype(type_.dtype)
    assert np.array_equal(t.set(values).numpy(), values)
    tt = ggpy.transpose(u)                       # a strided view: only its elements are written and read
    tt.buffer, tt.offset = u.buffer, u.offset    # the memory a view gets from its base (as GraphAllocator does)
    u.set(np.zeros(u.shape, type_.dtype))
    vals_t = rng.integers(-9, 9, size=tt.shape).astype(type_.dtype)
    assert np.array_equal(tt.set(vals_t).numpy(), vals_t)
    assert np.array_equal(u.numpy(), vals_t.T)


def test_graph_reuses_its_launches(cuda_backend):
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (1000, 3)).set_input()
    y = ggpy.gelu(ggpy.add(ggpy.scale(x, 2.0), x))
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(5)
    x.set(rng.standard_normal(x.shape).astype(np.float32))
    cuda_backend.compute(graph)
    first = cuda_backend.program(graph)
    v = rng.standard_normal(x.shape).astype(np.float32)          # new values through the same launches
    x.set(v)
    cuda_backend.compute(graph)
    assert cuda_backend.program(graph) is first and len(first) == 1        # one generated kernel for the chain
    times = cuda_backend.profile(graph)
    assert [t.name for t in times] == ["fused:scale+add+gelu"]
    assert all(s >= 0 for _, _, s in times)
    u = 3.0 * v.astype(np.float64)
    assert np.allclose(y.numpy(), 0.5 * u * (1 + np.tanh(0.7978845608 * (u + 0.044715 * u ** 3))), rtol=1e-5,
                       atol=1e-6)


def test_compile_cache(cuda_backend, tmp_path, monkeypatch):
    from ggpy.backends.cuda import compiler
    from ggpy.backends.cuda.device import get_device
    monkeypatch.setenv("GGPY_CUDA_CACHE", str(tmp_path))
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.f; }'
    arch = get_device("cuda").arch
    before = dict(compiler.STATS)
    first = compiler.compile_cubin(src, arch, "cache_test")
    second = compiler.compile_cubin(src, arch, "cache_test")
    assert first == second
    assert compiler.STATS["compiles"] == before["compiles"] + 1
    assert compiler.STATS["hits"] == before["hits"] + 1
    assert len(list(tmp_path.glob("cache_test-*.cubin"))) == 1


def test_second_process_compiles_nothing(cuda_backend, tmp_path):
    code = ("import ggpy; from ggpy.backends.cuda import compiler; b = ggpy.backends.make_backend('cuda'); "
            "b.modules.function('soft_max_f32'); print(compiler.STATS['compiles'], compiler.STATS['hits'])")
    env = dict(os.environ, GGPY_CUDA_CACHE=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__)))).stdout.split() for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]


def test_bad_device_index(cuda_backend):
    with pytest.raises(ggpy.CudaError, match=r"'cuda:99' does not exist: \d+ device\(s\) found"):
        ggpy.backends.make_backend("cuda:99")
    with pytest.raises(ggpy.CudaError, match="expected 'cuda' or 'cuda:N'"):
        ggpy.backends.cuda.CUDABackend("cuda:x")


def test_unsupported_op_is_refused(cuda_backend):
    from ggpy.ops._common import new_node
    ctx = ggpy.Context()
    y = new_node("no_such_op", ggpy.F32, (8, 4, 6), [ctx.new_tensor(ggpy.F32, (8, 4, 6))])
    assert not cuda_backend.supports_op(y)
    assert cuda_backend.kernel_name(y) == "unsupported"
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    with pytest.raises(ggpy.UnsupportedOpError, match=r"backend cuda:0 cannot run node .* op=no_such_op.*: no CUDA "
                                                      r"kernel for op no_such_op"):
        ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)


def test_mul_mat_refused_without_nvmath(cuda_backend, monkeypatch):
    from ggpy.backends.cuda.kernels import matmul as mm
    monkeypatch.setattr(mm, "MISSING", "needs nvmath-python (test)")
    ctx = ggpy.Context()
    y = ggpy.mul_mat(ctx.new_tensor(ggpy.F32, (8, 4)), ctx.new_tensor(ggpy.F32, (8, 3)))
    assert not cuda_backend.supports_op(y)
    assert cuda_backend.refusal(y) == "mul_mat on CUDA needs nvmath-python (test)"


def test_driver_errors_name_the_call(cuda_backend):
    from ggpy.backends.cuda.driver import check, driver
    with pytest.raises(ggpy.CudaError, match="cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
        check(driver.cuMemAlloc(1 << 60), "cuMemAlloc")
    with pytest.raises(ggpy.OutOfMemoryError, match="cannot allocate a buffer of"):
        cuda_backend.buffer_type.alloc_buffer(1 << 60)


@pytest.mark.parametrize("act", [None, "gelu_erf", "relu"])
@pytest.mark.parametrize("n", [64, 150, 320, 500, 513, 3000])
def test_norm_affine_fused(cuda_backend, n, act):
    """norm -> mul(weight) -> add(bias) [-> activation] (LayerNorm's affine) is one row kernel writing the last
    node's memory."""
    from math import erf
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (n, 7, 3)).set_input()
    w = ctx.new_tensor(ggpy.F32, (n,)).set_input()
    b = ctx.new_tensor(ggpy.F32, (n,)).set_input()
    y = ggpy.add(ggpy.mul(ggpy.norm(x, 1e-5), w), b)
    y = getattr(ggpy, act)(y) if act else y
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(2)
    for t in (x, w, b):
        t.set((rng.standard_normal(t.shape) + 3 * (act is None)).astype(np.float32))
    cuda_backend.compute(graph)
    kernel = "norm_affine_f32" if n > 512 else "norm_affine_vec_f32" if n % 4 == 0 else "norm_affine_warp_f32"
    assert [st.name for st in cuda_backend.program(graph)] == [kernel + "+scale+bias" + (f"+{act}" if act else "")]
    xv = x.numpy().astype(np.float64)
    ref = (xv - xv.mean(-1, keepdims=True)) / np.sqrt(xv.var(-1, keepdims=True) + 1e-5) * w.numpy() + b.numpy()
    if act == "gelu_erf":
        ref = 0.5 * ref * (1 + np.vectorize(erf)(ref / np.sqrt(2)))
    elif act == "relu":
        ref = np.maximum(ref, 0)
    assert np.allclose(y.numpy(), ref, atol=1e-4)


@pytest.mark.parametrize("wtype", [ggpy.F32, ggpy.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("order", ["residual_first", "residual_second"])
def test_mul_mat_bias_residual(blas_backend, order, wtype):
    """mul_mat -> add(bias) -> reshape -> add(residual) is one GEMM: BIAS epilogue, the residual as cuBLASLt's C
    matrix (beta = 1), D written over the residual (the plan's in-place residual add); an activation after it
    stays a node."""
    from math import erf

    def gelu(u):
        return 0.5 * u * (1 + np.vectorize(erf)(u / np.sqrt(2)))
    ctx = ggpy.Context()
    w = ctx.new_tensor(wtype, (40, 40)).set_input()
    bias = ctx.new_tensor(ggpy.F32, (40,)).set_input()
    r_in = ctx.new_tensor(ggpy.F32, (40, 10, 9)).set_input()
    r = ggpy.scale(r_in, 1.0)             # computed (an input or an output is never overwritten in place)
    x = ggpy.reshape_2d(ggpy.gelu_erf(r), 40, 90)                # read before the GEMM, as in MobileSAM's blocks
    v = ggpy.reshape_3d(ggpy.add(ggpy.mul_mat(w, x), bias), 40, 10, 9)
    y = ggpy.gelu_erf(ggpy.add(r, v) if order == "residual_first" else ggpy.add(v, r))
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(6)
    vals = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (w, bias, r_in)}
    for t, val in vals.items():
        t.set(val)
    blas_backend.compute(graph)
    names = [st.name for st in blas_backend.program(graph)]
    assert names[-2:] == [f"cublaslt_{wtype.name.lower()}_f32+bias+residual", "gelu_erf_c_f32"]
    wv = (vals[w].astype(np.float16) if wtype == ggpy.F16 else vals[w]).astype(np.float64)
    rv = vals[r_in].astype(np.float64)
    ref = (gelu(rv).reshape(90, 40) @ wv.T + vals[bias]).reshape(rv.shape) + rv
    assert np.allclose(y.numpy(), gelu(ref), atol=1e-4)


@pytest.mark.parametrize("case", ["residual is an input", "residual read later"])
def test_residual_not_in_place_is_not_fused(blas_backend, case):
    """The residual add stays a node when D could not be written over the residual: an input (never reused in
    place), or a residual read again after the GEMM."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (16, 8)).set_input()
    x = ctx.new_tensor(ggpy.F32, (16, 12)).set_input()
    bias = ctx.new_tensor(ggpy.F32, (8,)).set_input()
    r_in = ctx.new_tensor(ggpy.F32, (8, 12)).set_input()
    r = r_in if case == "residual is an input" else ggpy.scale(r_in, 1.0)
    graph = ggpy.Graph()
    graph.build_forward_expand(r)
    y = ggpy.add(ggpy.add(ggpy.mul_mat(w, x), bias), r)
    if case == "residual read later":
        y = ggpy.mul(y, r)
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(11)
    vals = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (w, x, bias, r_in)}
    for t, val in vals.items():
        t.set(val)
    blas_backend.compute(graph)
    names = [st.name for st in blas_backend.program(graph)]
    assert "cublaslt_f32_f32+bias" in names and "add_c_f32_f32" in names
    hv = vals[x].astype(np.float64) @ vals[w].T.astype(np.float64) + vals[bias] + vals[r_in]
    assert np.allclose(y.numpy(), hv * vals[r_in] if case == "residual read later" else hv, atol=1e-4)


def test_residual_read_twice_is_not_fused(blas_backend):
    """A bias add read by the residual add and another node keeps the residual add a node."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (16, 8)).set_input()
    x = ctx.new_tensor(ggpy.F32, (16, 12)).set_input()
    bias = ctx.new_tensor(ggpy.F32, (8,)).set_input()
    r = ctx.new_tensor(ggpy.F32, (8, 12)).set_input()
    h = ggpy.add(ggpy.mul_mat(w, x), bias)
    y = ggpy.mul(ggpy.add(h, r), h)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(7)
    vals = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (w, x, bias, r)}
    for t, val in vals.items():
        t.set(val)
    blas_backend.compute(graph)
    assert [st.name for st in blas_backend.program(graph)] == ["cublaslt_f32_f32+bias", "fused:add+mul"]
    hv = vals[x].astype(np.float64) @ vals[w].T.astype(np.float64) + vals[bias]
    assert np.allclose(y.numpy(), (hv + vals[r]) * hv, atol=1e-4)


@pytest.mark.parametrize("n,mtype", [(49, ggpy.F32), (196, ggpy.F32), (196, ggpy.F16), (256, ggpy.F32),
                                     (257, ggpy.F32), (5, None)])
def test_soft_max_rows(cuda_backend, n, mtype):
    """Windowed attention's soft_max: rows of n (one warp each up to 256, else one block), the per-head bias
    table broadcast over windows, a scale; float64 reference."""
    heads, windows = 3, 5
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (n, n if n < 200 else 7, heads, windows)).set_input()
    mask = ctx.new_tensor(mtype, (n, x.ne[1], heads)).set_input() if mtype else None
    y = ggpy.soft_max_ext(x, mask, 0.3, 0.0) if mtype else ggpy.soft_max(x)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(8)
    xv = rng.uniform(-5, 5, x.shape).astype(np.float32)
    x.set(xv)
    v = xv.astype(np.float64) * (0.3 if mtype else 1.0)
    if mtype:
        mv = rng.uniform(-2, 2, mask.shape).astype(np.float32)
        mask.set(mv)
        v = v + mask.numpy().astype(np.float64)[None]
    cuda_backend.compute(graph)
    suffix = f"_f32_{mtype.name.lower()}" if mtype else "_f32"
    assert cuda_backend.kernel_name(y) == ("soft_max_warp" if n <= 256 else "soft_max") + suffix
    e = np.exp(v - v.max(-1, keepdims=True))
    assert np.allclose(y.numpy(), e / e.sum(-1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("bne,flat", [((1, 1, 5), True), ((33, 7, 1), True), ((1, 7, 5), True),
                                      ((33, 1, 5), False)])
def test_add_broadcast_block(cuda_backend, bne, flat):
    """add of b whose dims are one block of a's (a per-channel vector, ...) runs the flat kernel; a broadcast
    dim inside the block takes the strided kernel (32-bit indices); both as numpy's."""
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (33, 7, 5)).set_input()
    b = ctx.new_tensor(ggpy.F32, bne).set_input()
    y = ggpy.add(a, b)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(9)
    av, bv = rng.standard_normal(a.shape).astype(np.float32), rng.standard_normal(b.shape).astype(np.float32)
    a.set(av)
    b.set(bv)
    cuda_backend.compute(graph)
    assert cuda_backend.kernel_name(y) == ("add_c_f32_f32" if flat else "add_f32_f32")
    assert cuda_backend.program(graph)[0].args.iop == (elementwise._inner(y) if flat else 1)
    assert np.allclose(y.numpy(), av + bv, atol=1e-6)


@pytest.mark.parametrize("n,heads,hd,nw,mtype", [(49, 4, 32, 3, ggpy.F32), (196, 5, 32, 2, ggpy.F32),
                                                  (50, 3, 16, 2, ggpy.F16), (70, 2, 64, 1, ggpy.F32),
                                                  (33, 2, 32, 2, None), (9, 2, 16, 2, ggpy.F32)])
def test_window_attention_fused(blas_backend, n, heads, hd, nw, mtype):
    """TinyViT's windowed attention (qkv split per head, k.q, soft_max with a per-head bias table broadcast over
    windows and a scale, v.p, heads back together by permute + cont) is one win_attn kernel writing the cont's
    memory (its block sized for the larger of the scores and the result); float64 reference."""
    c = heads * hd
    ctx = ggpy.Context()
    qkv = ctx.new_tensor(ggpy.F32, (3 * c, n, nw)).set_input()
    mask = ctx.new_tensor(mtype, (n, n, heads)).set_input() if mtype else None

    def part(i):
        return ggpy.view_4d(qkv, hd, heads, n, nw, 3 * hd * 4, qkv.nb[1], qkv.nb[2], i * hd * 4)
    q, k = ggpy.permute(part(0), 0, 2, 1, 3), ggpy.permute(part(1), 0, 2, 1, 3)
    v_t = ggpy.permute(part(2), 1, 2, 0, 3)
    p = ggpy.soft_max_ext(ggpy.mul_mat(k, q), mask, hd ** -0.5) if mtype else ggpy.soft_max(ggpy.mul_mat(k, q))
    y = ggpy.cont_3d(ggpy.permute(ggpy.mul_mat(v_t, p), 0, 2, 1, 3), c, n, nw)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(10)
    qkv.set(rng.standard_normal(qkv.shape).astype(np.float32) * 2)
    if mtype:
        mask.set(rng.uniform(-2, 2, mask.shape).astype(np.float32))
    blas_backend.compute(graph)
    names = [st.name for st in blas_backend.program(graph)]
    assert names == [f"win_attn_s{1 if n <= 8 else 4}_hd{hd}_{(mtype or ggpy.F32).name.lower()}_f32_f32"]
    t = qkv.numpy().astype(np.float64).reshape(nw, n, heads, 3, hd)
    qv, kv, vv = t[..., 0, :], t[..., 1, :], t[..., 2, :]
    s = np.einsum("wihd,wjhd->whij", qv, kv)
    if mtype:
        s = s * hd ** -0.5 + mask.numpy().astype(np.float64)[None]
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("whij,wjhd->wihd", e / e.sum(-1, keepdims=True), vv).reshape(nw, n, c)
    np.testing.assert_allclose(y.numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n,heads,hd,nw,mtype,t,out", [(49, 4, 32, 3, ggpy.F32, ggpy.F16, ggpy.F32),
                                                      (196, 5, 32, 2, ggpy.F32, ggpy.F16, ggpy.F16),
                                                      (50, 3, 16, 2, ggpy.F16, ggpy.BF16, ggpy.BF16),
                                                      (70, 2, 64, 1, ggpy.F32, ggpy.BF16, ggpy.F32),
                                                      (33, 2, 32, 2, None, ggpy.F16, ggpy.F16),
                                                      (150, 1, 16, 1, ggpy.F16, ggpy.F16, ggpy.F32)])
def test_window_attention_tensor_cores(blas_backend, n, heads, hd, nw, mtype, t, out):
    """The windowed attention of F16 / BF16 q, k, v (the activations of a half-precision MobileSAM) runs on tensor cores
    (win_attn_tc: 16-query tiles, 64-key chunks, queries and keys past a multiple of 16 or 64) into an F32 cont or a
    cast to the inputs' type, as the float64 reference of the rounded inputs within the rounding of P and the result."""
    import ml_dtypes
    c = heads * hd
    f = t.size
    ctx = ggpy.Context()
    qkv = ctx.new_tensor(t, (3 * c, n, nw)).set_input()
    mask = ctx.new_tensor(mtype, (n, n, heads)).set_input() if mtype else None

    def part(i):
        return ggpy.view_4d(qkv, hd, heads, n, nw, 3 * hd * f, qkv.nb[1], qkv.nb[2], i * hd * f)
    q, k = ggpy.permute(part(0), 0, 2, 1, 3), ggpy.permute(part(1), 0, 2, 1, 3)
    v_t = ggpy.permute(part(2), 1, 2, 0, 3)
    p = ggpy.soft_max_ext(ggpy.mul_mat(k, q), mask, hd ** -0.5) if mtype else ggpy.soft_max(ggpy.mul_mat(k, q))
    heads_back = ggpy.permute(ggpy.mul_mat(v_t, p), 0, 2, 1, 3)
    y = ggpy.cont(heads_back) if out == ggpy.F32 else ggpy.cast(heads_back, out)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(blas_backend).alloc_graph(graph)
    rng = np.random.default_rng(13)
    np_t = np.float16 if t == ggpy.F16 else ml_dtypes.bfloat16
    qkv_v = (rng.standard_normal(qkv.shape) * 2).astype(np_t)
    qkv.set(qkv_v)
    if mtype:
        mask_v = rng.uniform(-2, 2, mask.shape)
        mask_v[..., : n // 3, n // 2:] = -np.inf                 # keys hidden from some queries
        mask.set(mask_v.astype(np.float32 if mtype == ggpy.F32 else np.float16))
    blas_backend.compute(graph)
    names = [st.name for st in blas_backend.program(graph)]
    assert names == [f"win_attn_tc_hd{hd}_{(mtype or ggpy.F32).name.lower()}_{t.name.lower()}_{out.name.lower()}"]
    x = qkv_v.astype(np.float64).reshape(nw, n, heads, 3, hd)
    s = np.einsum("wihd,wjhd->whij", x[..., 0, :], x[..., 1, :])
    if mtype:
        s = s * hd ** -0.5 + mask.numpy().astype(np.float64)[None]
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("whij,wjhd->wihd", e / e.sum(-1, keepdims=True), x[..., 2, :])
    got = y.numpy().astype(np.float64).reshape(ref.shape)
    tol = 2e-2 if ggpy.BF16 in (t, out) else 4e-3         # P rounded to T (and the result to `out`)
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max(), np.abs(got - ref).max()


@pytest.mark.parametrize("nq,nk,heads,hk,b,bk,shared_q", [(7, 300, 8, 8, 8, 1, False), (7, 300, 8, 2, 8, 8, False),
                                                            (300, 7, 4, 4, 3, 3, True), (5, 64, 2, 1, 2, 2, False),
                                                            (1, 300, 9, 3, 1, 1, False)])
def test_cross_attention_fused(blas_backend, nq, nk, heads, hk, b, bk, shared_q):
    """SAM's cross-attention (nq queries over nk keys, hd 16): keys and values shared by the batch or by groups of
    heads broadcast as mul_mat's, queries shared through a view of stride 0; one win_attn kernel (1, 4 or 16 lanes
    a query; not for a single query over many keys, as in generation) as the float64 reference."""
    hd = 16
    ctx = ggpy.Context()
    qsrc = ctx.new_tensor(ggpy.F32, (hd * heads, nq, 1 if shared_q else b)).set_input()
    k = ctx.new_tensor(ggpy.F32, (hd, nk, hk, bk)).set_input()
    v = ctx.new_tensor(ggpy.F32, (hd, hk, nk, bk)).set_input()
    q = ggpy.permute(ggpy.view_4d(qsrc, hd, heads, nq, b, hd * 4, qsrc.nb[1], 0 if shared_q else qsrc.nb[2]),
                     0, 2, 1, 3)
    p = ggpy.soft_max_ext(ggpy.mul_mat(k, q), None, 0.3)
    y = ggpy.cont(ggpy.permute(ggpy.mul_mat(ggpy.permute(v, 1, 2, 0, 3), p), 0, 2, 1, 3))
    names = _computed(blas_backend, y, (qsrc, k, v), 11)
    split = 1 if nk <= 8 else 16 if nq <= 16 and nk > 64 else 4
    if nq <= 16 and nk > 32 and -(-nq // (128 // split)) * heads * b < 64:     # too few blocks: GEMMs, soft_max
        assert not any(name.startswith("win_attn") for name in names)
    else:
        assert names == [f"win_attn_s{split}_hd{hd}_f32_f32_f32"]
    qv = np.broadcast_to(qsrc.numpy().astype(np.float64).reshape(-1, nq, heads, hd), (b, nq, heads, hd))
    kv = np.repeat(np.broadcast_to(k.numpy().astype(np.float64), (b, hk, nk, hd)), heads // hk, axis=1)
    vv = np.repeat(np.broadcast_to(v.numpy().astype(np.float64), (b, nk, hk, hd)), heads // hk, axis=2)
    s = np.einsum("bihd,bhjd->bhij", qv, kv) * 0.3
    e = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhij,bjhd->bihd", e / e.sum(-1, keepdims=True), vv)
    np.testing.assert_allclose(y.numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [4096, 4098])
def test_unary_float4(cuda_backend, n):
    """Flat F32 unary kernels take float4 groups when the element count is a multiple of 4 (else scalars)."""
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (n, 3)).set_input()
    y = ggpy.gelu_erf(x)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    xv = np.random.default_rng(12).standard_normal(x.shape).astype(np.float32) * 3
    x.set(xv)
    cuda_backend.compute(graph)
    step = cuda_backend.program(graph)[0]
    assert step.name == "gelu_erf_c_f32" and step.args.iop == (4 if n % 4 == 0 else 0)
    from math import erf
    ref = 0.5 * xv * (1 + np.vectorize(erf)(xv.astype(np.float64) / np.sqrt(2)))
    assert np.allclose(y.numpy(), ref, atol=1e-6)
