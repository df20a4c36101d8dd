"""CUDA mul_mat on integer dot products (mmvq: b quantized to q8_1, __dp4a) against the exact dot-product kernel
(mmv, forced) and float64 (gguf's dequantization of a): every quantized type, both variants (b quantized into the
temp block by a launch of its own, or by each block into its shared memory), and the fused gate/up + silu * up and
product + residual kernels against the unfused float64 graph; the batch kernels (mmvq_b: 9 to MMVQ_MAX_BATCH columns
of b, a server's batched decode) likewise. Needs a GPU (cuda_backend skips without one), but for the tests that say
they need none."""
from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest

import ggpy
from ggpy.backends.base import Backend
from ggpy.backends.cuda import CUDABackend, kernels  # noqa: F401 - kernels registers the CUDA entries
from ggpy.backends.cuda.cublas import MISSING
from ggpy.backends.cuda.kernels import quant
from ggpy.backends.cuda.kernels.matmul import NMV_TYPES
from ggpy.backends.cuda.registry import KERNELS
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.matmul import QUANT_NMSE, Q8_NMSE, mmvq_batch_cases, mmvq_cases, quant_cases
from ggpy.test_backend_ops.cases.util import random_blocks
from ggpy.types import QUANT_TYPES

FEW = [c for c in quant_cases() if c.build(ggpy.Context()).src[1].ne[1] <= 8]


class Table(Backend):
    """The CUDA kernel table without a device, with `force`."""
    kind, kernels = "CUDA", KERNELS

    def __init__(self, force):
        super().__init__(None)
        self.force = self.checked_force(force)


def test_forcing_a_preference_takes_the_first_that_runs():
    """No GPU needed: force={"mul_mat": ("mmv", "cublaslt")} keeps a model's mat-vec products exact and its GEMMs on
    cuBLASLt; an unknown implementation is refused."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.Q4_K, (256, 32))
    few, many = (ggpy.mul_mat(w, ctx.new_tensor(ggpy.F32, (256, n))) for n in (2, quant.MMVQ_MAX_BATCH + 1))
    table = Table({"mul_mat": ("mmv", "cublaslt")})
    assert Table({}).impl_for(few) == "mmvq" and table.impl_for(few) == "mmv"
    assert table.impl_for(many) == ("cublaslt" if MISSING is None else None)      # None: refused without cuBLASLt
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot force 'mul_mat' to run as 'dp4a'"):
        Table({"mul_mat": ("mmv", "dp4a")})


def test_a_batch_runs_on_the_batch_kernels():
    """No GPU needed: 9 to MMVQ_MAX_BATCH columns of b times a quantized a choose mmvq, whose batch kernel (mmvq_b) the
    kernel name says, with b's q8_1 columns in the temp block (never in shared memory, never the stream kernel); one
    column more chooses cuBLASLt; mmv (exact, at most MMV_MAX_N columns) refuses a batch, cublaslt stays forceable."""
    from ggpy.backends.cuda.kernels.matmul import temp_size
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.Q4_1, (576, 64))
    entry = KERNELS["mul_mat"]
    for n in (quant.MMV_MAX_N + 1, 12, quant.MMVQ_MAX_BATCH):
        node = ggpy.mul_mat(w, ctx.new_tensor(ggpy.F32, (576, n)))
        assert entry.choose(node, None) == "mmvq" and entry.kernel_name(node, "mmvq") == "mmvq_b_q4_1"
        assert quant.mmvq_batch(node) and not quant.mmvq_shared(node) and not quant.mmvq_stream_units(w, node.src[1])
        assert temp_size(node, "mmvq", None) >= n * 576 * 5 // 4 and not entry.accepts(node, "mmv", None)
        assert Table({"mul_mat": ("cublaslt", "mmvq")}).impl_for(node) == ("cublaslt" if MISSING is None else "mmvq")
        assert Table({"mul_mat": ("mmv", "mmvq")}).impl_for(node) == "mmvq"
    more = ggpy.mul_mat(w, ctx.new_tensor(ggpy.F32, (576, quant.MMVQ_MAX_BATCH + 1)))
    assert entry.choose(more, None) == "cublaslt" and not quant.mmvq_fits(more)
    few = ggpy.mul_mat(w, ctx.new_tensor(ggpy.F32, (576, quant.MMV_MAX_N)))
    assert entry.kernel_name(few, "mmvq") == "mmvq_q4_1" and not quant.mmvq_batch(few)


@pytest.mark.parametrize("case", FEW, ids=lambda c: c.id)
def test_forced_mmv_stays_exact(cuda_backend, case):
    result = run_case(dataclasses.replace(case, max_nmse=QUANT_NMSE), CUDABackend("cuda", force={"mul_mat": "mmv"}))
    assert result.ok, f"{case.id}: {result.message}"


STREAMED = []      # the units a lane of each product planned with the "stream" variant takes (0: not the stream kernel)


@pytest.fixture(params=["shared", "temp", "stream"])
def variant(request, monkeypatch):
    """mmvq's variant: b quantized by each block into its shared memory (small products), or into the temp block,
    then a warp per row (temp) or, for every one-column product of a type it takes, the stream kernel (mmvq_v: warps
    streaming rows, the next row's weights loaded before the current row's dots), which big products run."""
    if request.param != "shared":
        monkeypatch.setattr(quant, "MMVQ_SHARED_WEIGHTS", 0)
    else:
        monkeypatch.setattr(quant, "MMVQ_SHARED_MAX_K", 1 << 30)
    if request.param == "stream":
        units = quant.mmvq_stream_units
        monkeypatch.setattr(quant, "MMVQ_STREAM_BYTES", 0)
        monkeypatch.setattr(quant, "mmvq_stream_units", lambda a, b: STREAMED.append(units(a, b)) or STREAMED[-1])
    else:
        monkeypatch.setattr(quant, "MMVQ_STREAM_BYTES", 1 << 62)
    STREAMED.clear()
    return request.param


def assert_streamed(variant, t, n=1):
    """With the stream variant, a one-column product of a type the stream kernel takes ran on it."""
    if variant == "stream" and n == 1 and t in quant.MMVQ_STREAM_TYPES:
        assert any(STREAMED), STREAMED


@pytest.mark.parametrize("case", mmvq_cases() + FEW, ids=lambda c: c.id)
def test_mmvq_within_the_q8_tolerance(cuda_backend, variant, case):
    result = run_case(case, CUDABackend("cuda", force={"mul_mat": "mmvq"}))
    assert result.ok, f"{case.id}: {result.message}"


def _nmse(out, ref) -> float:
    return float(np.sum((out - ref) ** 2) / np.sum(ref ** 2))


def _weights(rng, t, k, m):
    """(raw blocks, float64 values) of an m x k weight of type t."""
    raw = random_blocks(rng, t, (k, m, 1, 1)).reshape(m, -1)
    return raw, gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.ggml_id)).astype(np.float64)


def _run(backend, build, values):
    """Build (ctx -> (output, [inputs])), plan, set `values` (in input order), compute: (output values, step names)."""
    ctx = ggpy.Context()
    out, inputs = build(ctx)
    graph = ggpy.Graph().build_forward_expand(out.set_output())
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for t, v in zip(inputs, values):
        t.set(v if t.type.quantized else v.reshape(tuple(reversed(t.ne))))
    backend.compute(graph)
    return out.numpy().astype(np.float64), [st.name for st in backend.program(graph)]


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
def test_mmvq_accuracy_on_a_decoder_shape(cuda_backend, variant, t):
    """A 1B decoder's down-like product (K 2048, 256 rows, one token) on normal activations: mmvq's nmse against
    float64 is the activations' 8-bit rounding (~1e-5), mmv's float32 accumulation (~1e-12)."""
    rng = np.random.default_rng(5)
    raw, w = _weights(rng, t, 2048, 256)
    x = rng.standard_normal((1, 2048)).astype(np.float32)

    def build(ctx):
        a, b = ctx.new_tensor(t, (2048, 256)).set_input(), ctx.new_tensor(ggpy.F32, (2048, 1)).set_input()
        return ggpy.mul_mat(a, b), [a, b]
    ref = x.astype(np.float64) @ w.T
    errs = {}
    for impl in ("mmv", "mmvq"):
        out, names = _run(CUDABackend("cuda", force={"mul_mat": impl}), build, [raw, x])
        assert names[-1].startswith({"mmv": "mmv_", "mmvq": {"shared": "mmvq_s_", "temp": "mmvq_", "stream": "mmvq_"}[variant]}[impl])
        errs[impl] = _nmse(out.reshape(ref.shape), ref)
    assert_streamed(variant, t)
    print(f"\n{t.name} ({variant}): nmse vs float64: mmv {errs['mmv']:.2e}, mmvq {errs['mmvq']:.2e}")
    assert errs["mmv"] < QUANT_NMSE and 1e-8 < errs["mmvq"] < Q8_NMSE / 10


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 3])
def test_fused_glu_and_residual(cuda_backend, variant, t, n):
    """silu(Wg x) * (Wu x) as one mmvq_glu launch and Wd h + r as one mmvq launch with the residual, against the
    unfused float64 graph; the unfused backend (fuse=False) gives the same within the q8 tolerance."""
    rng = np.random.default_rng(11)
    k, f = (256, 512) if t.block == 256 else (96, 160)
    (rg, wg), (ru, wu), (rd, wd) = _weights(rng, t, k, f), _weights(rng, t, k, f), _weights(rng, t, f, k)
    x, r = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)

    def build(ctx):
        g, u = ctx.new_tensor(t, (k, f)).set_input(), ctx.new_tensor(t, (k, f)).set_input()
        d, xi = ctx.new_tensor(t, (f, k)).set_input(), ctx.new_tensor(ggpy.F32, (k, n)).set_input()
        ri = ctx.new_tensor(ggpy.F32, (k, n)).set_input()
        h = ggpy.mul(ggpy.silu(ggpy.mul_mat(g, xi)), ggpy.mul_mat(u, xi))
        return ggpy.add(ri, ggpy.mul_mat(d, h)), [g, u, d, xi, ri]
    gate, up = x.astype(np.float64) @ wg.T, x.astype(np.float64) @ wu.T
    ref = r + (gate / (1 + np.exp(-gate)) * up) @ wd.T
    fused, names = _run(CUDABackend("cuda"), build, [rg, ru, rd, x, r])
    assert any(s.startswith(f"mmvq_{t.name}") and s.endswith("+glu_silu") for s in names), names
    assert ("quantize_q8_1_f32" in names) == (variant != "shared"), names
    assert any(s.startswith(f"mmvq_{t.name}") and s.endswith("+add") for s in names), names
    assert_streamed(variant, t, n)
    plain, _ = _run(CUDABackend("cuda", fuse=False), build, [rg, ru, rd, x, r])
    assert _nmse(fused.reshape(ref.shape), ref) < Q8_NMSE and _nmse(plain.reshape(ref.shape), ref) < Q8_NMSE


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
def test_model_weights_give_the_same_sums(cuda_backend, variant, monkeypatch, t):
    """A product and a norm + glu (norm_mat_vec) of weights placed by alloc_ctx_tensors (model weights: their loads come
    before the grid wait, quant.MMVQ_WEIGHTS; with the temp variant rows of few units several a warp) give the same
    sums as the same weights in the graph's buffer, a row a warp; the product within the q8 tolerance of float64.
    Rows of 3 units (36 blocks: the Q4_0, Q5_0, Q8_0 rows start at every 2-byte offset mod 16)."""
    rng = np.random.default_rng(7)
    k, m = (256, 100) if t.block == 256 else (96, 100)
    raws = [_weights(rng, t, k, m) for _ in range(3)]
    x = rng.standard_normal((1, k)).astype(np.float32)
    nw = rng.standard_normal(k).astype(np.float32)

    def run(model):
        backend, ctx = CUDABackend("cuda"), ggpy.Context()
        wctx = ggpy.Context() if model else ctx
        ws = [wctx.new_tensor(t, (k, m)) for _ in raws]
        n = wctx.new_tensor(ggpy.F32, (k,))
        if model:
            ggpy.alloc_ctx_tensors(wctx, backend)
        else:
            for w in ws + [n]:
                w.set_input()
        xi = ctx.new_tensor(ggpy.F32, (k, 1)).set_input()
        h = ggpy.mul(ggpy.rms_norm(xi, 1e-6), n)
        glu = ggpy.mul(ggpy.silu(ggpy.mul_mat(ws[1], h)), ggpy.mul_mat(ws[2], h)).set_output()
        out = ggpy.mul_mat(ws[0], xi).set_output()
        graph = ggpy.Graph().build_forward_expand(out).build_forward_expand(glu)
        ggpy.GraphAllocator(backend).alloc_graph(graph)
        for w, (raw, _) in zip(ws, raws):
            w.set(raw)
        n.set(nw)
        xi.set(x[0])
        backend.compute(graph)
        iops = [getattr(st.args, "a", st.args).iop for st in backend.program(graph)
                if any(s in st.name for s in ("mmvq", "mat_vec", "glu_silu"))]
        return out.numpy().copy(), glu.numpy().copy(), iops
    fast, fast_glu, iops = run(True)
    assert iops and all(i & quant.MMVQ_WEIGHTS for i in iops), iops
    monkeypatch.setattr(quant, "mmvq_rows_per_warp", lambda a, b, glu: 1)
    plain, plain_glu, iops = run(False)
    assert iops and not any(i & quant.MMVQ_WEIGHTS for i in iops), iops
    for a, b in ((fast, plain), (fast_glu, plain_glu)):        # the same sums (up to how the compiler contracts them)
        assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max()
    ref = x.astype(np.float64) @ raws[0][1].T
    assert _nmse(fast.reshape(ref.shape), ref) < Q8_NMSE


@pytest.mark.parametrize("case", mmvq_batch_cases(), ids=lambda c: c.id)
def test_mmvq_batch_within_the_q8_tolerance(cuda_backend, case):
    """Every batch case on the default backend runs quantize_q8_1 then mmvq_b (no cuBLASLt, no dequantized weights)."""
    result = run_case(case, cuda_backend)
    assert result.ok, f"{case.id}: {result.message}"
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    names = [st.name for st in cuda_backend.program(graph)]
    t = graph.nodes[-1].src[0].type
    assert f"mmvq_b_{t.name}" in names and not any(n.startswith(("cublaslt", "copy_")) for n in names), names


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [12, 16])
def test_mmvq_batch_accuracy_and_variants(cuda_backend, monkeypatch, t, n):
    """A 1B decoder's down-like product (K 2048, 256 rows) times n columns of normal activations: the batch kernel's
    nmse against float64 is the activations' 8-bit rounding (~1e-5, as mmvq's on one column); its columns read from
    the temp block instead of shared memory, and two rows a warp instead of one, give the same sums (each lane takes
    the same units in the same order)."""
    rng = np.random.default_rng(5)
    raw, w = _weights(rng, t, 2048, 256)
    x = rng.standard_normal((n, 2048)).astype(np.float32)

    def build(ctx):
        a, b = ctx.new_tensor(t, (2048, 256)).set_input(), ctx.new_tensor(ggpy.F32, (2048, n)).set_input()
        return ggpy.mul_mat(a, b), [a, b]
    ref = x.astype(np.float64) @ w.T
    out, names = _run(CUDABackend("cuda"), build, [raw, x])
    assert names == ["quantize_q8_1_f32", f"mmvq_b_{t.name}"], names
    err = _nmse(out.reshape(ref.shape), ref)
    print(f"\n{t.name} N={n}: nmse vs float64 {err:.2e}")
    assert 1e-8 < err < Q8_NMSE / 10
    plan = quant.mmvq_batch_plan
    assert plan(CUDABackend("cuda"), *[ggpy.Context().new_tensor(ggpy.F32, ne) for ne in ((2048, 256), (2048, n))],
                False) == (1, n * 2048 * 5 // 4)                   # one row a warp, the columns in shared memory
    monkeypatch.setattr(quant, "mmvq_batch_plan", lambda *args: (2, plan(*args)[1]))       # two rows a warp
    two, _ = _run(CUDABackend("cuda"), build, [raw, x])
    monkeypatch.setattr(quant, "mmvq_batch_plan", lambda *args: (1, 0))      # the columns from the temp block
    apart, _ = _run(CUDABackend("cuda"), build, [raw, x])
    for other in (two, apart):
        assert np.abs(other - out).max() <= 1e-6 * np.abs(out).max()


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [9, 16])
def test_batch_fused_glu_residual_and_norm(cuda_backend, t, n):
    """A batch's feed-forward block, rms_norm(x) * w -> silu(Wg h) * (Wu h) -> Wd . + x, on the batch kernels: the norm
    quantized once (rms_norm_mul_q8_1_b, the norm_mat_vec pattern; the glu pattern for weight types it does not take)
    for the glu kernel (mmvq_b_glu), the down product with the residual (mmvq_b + add), against the float64 graph; the
    unfused backend gives the same within the q8 tolerance."""
    rng = np.random.default_rng(13)
    k, f = (256, 512) if t.block == 256 else (96, 160)
    (rg, wg), (ru, wu), (rd, wd) = _weights(rng, t, k, f), _weights(rng, t, k, f), _weights(rng, t, f, k)
    x, nw = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)

    def build(ctx):
        g, u = ctx.new_tensor(t, (k, f)).set_input(), ctx.new_tensor(t, (k, f)).set_input()
        d, xi = ctx.new_tensor(t, (f, k)).set_input(), ctx.new_tensor(ggpy.F32, (k, n)).set_input()
        ni = ctx.new_tensor(ggpy.F32, (k,)).set_input()
        h = ggpy.mul(ggpy.rms_norm(xi, 1e-6), ni)
        y = ggpy.mul(ggpy.silu(ggpy.mul_mat(g, h)), ggpy.mul_mat(u, h))
        return ggpy.add(xi, ggpy.mul_mat(d, y)), [g, u, d, xi, ni]
    x64 = x.astype(np.float64)
    h = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6) * nw
    gate, up = h @ wg.T, h @ wu.T
    ref = x64 + (gate / (1 + np.exp(-gate)) * up) @ wd.T
    fused, names = _run(CUDABackend("cuda"), build, [rg, ru, rd, x, nw])
    norm = (["rms_norm_f32+mul+glu_silu", f"mmvq_b_glu_{t.name}"] if t in NMV_TYPES else     # norm_mat_vec's types
            ["rms_norm_mul_f32", "quantize_q8_1_f32", f"mmvq_b_{t.name}+glu_silu"])      # else the glu pattern
    assert names == norm + ["quantize_q8_1_f32", f"mmvq_b_{t.name}+add"], names
    plain, plain_names = _run(CUDABackend("cuda", fuse=False), build, [rg, ru, rd, x, nw])
    assert f"mmvq_b_{t.name}" in plain_names, plain_names
    assert _nmse(fused.reshape(ref.shape), ref) < Q8_NMSE and _nmse(plain.reshape(ref.shape), ref) < Q8_NMSE


@pytest.mark.parametrize("case", [c for c in mmvq_batch_cases() if c.id.startswith(("mul_mat(mmvq_b,q4_k", "mul_mat(mmvq_b,q8_0"))],
                         ids=lambda c: c.id)
def test_a_batch_mmvq_cannot_load_runs_exact_in_groups(cuda_backend, monkeypatch, case):
    """Rows the batch kernel cannot load (mmvq_aligned false) fall back to the exact kernel, a launch per MMV_MAX_N
    columns (mmv takes no more), within float32 accumulation of float64."""
    monkeypatch.setattr(quant, "mmvq_aligned", lambda a: False)
    result = run_case(dataclasses.replace(case, max_nmse=QUANT_NMSE), CUDABackend("cuda"))
    assert result.ok, f"{case.id}: {result.message}"
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    backend = CUDABackend("cuda")
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    names = [st.name for st in backend.program(graph)]
    n = graph.nodes[-1].src[1].ne[1]
    assert len(names) == -(-n // quant.MMV_MAX_N) and all(s.startswith("mmv_") for s in names), names
