"""mul_mat_id beyond the test-backend-ops cases: the CPU's exact implementation (dot) and CUDA's grouped tile GEMM
(forced) on every weight type, only the chosen experts' rows read (the others hold nan), an expert id out of range,
which implementation runs a prompt, the constructor's checks."""
from __future__ import annotations

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.moe import _experts, _mul_mat_id
from ggpy.test_backend_ops.harness import OpCase
from ggpy.types import BF16, F16, F32, I32, QUANT_TYPES


@pytest.mark.parametrize("impl", ["dot", "grouped"])
@pytest.mark.parametrize("t", (F32, F16, BF16) + tuple(QUANT_TYPES), ids=lambda t: t.name)
def test_cpu_exact_implementations(t, impl):
    """dot: float32 dot products of the dequantized rows (a row one slot chose: quants.DOT); grouped: the slots
    sorted by expert, panels of rows dequantized once and multiplied by the own GEMM (70 tokens of 3 slots over 6
    experts: ~35 slots an expert, M = 70 two panels and an edge)."""
    backend = ggpy.CPUBackend(n_threads=2, force={"mul_mat_id": impl})
    k = 2 * t.block if t.block == 256 else 128 if t.quantized else 72
    for used, tokens, bc in ((2, 1, True), (3, 70, False), (6, 20, True)):
        case = OpCase("mul_mat_id", f"{impl},{t.name},{used},{tokens}", lambda ctx, u=used, n=tokens, bc=bc:
                      _mul_mat_id(ctx, t, k, 70 if impl == "grouped" else 24, 6, u, n, bc), fill=_experts(6),
                      max_nmse=1e-9, kernel=f"{impl}_id_{t.name}")
        result = run_case(case, backend, seed=used)
        assert result.ok, result.message


@pytest.mark.parametrize("t", (F32, F16, BF16) + tuple(QUANT_TYPES), ids=lambda t: t.name)
def test_cuda_grouped_is_exact(cuda_backend, t):
    """CUDA's grouped implementation (slots sorted by expert, a tile GEMM): exact float32 on the dequantized rows;
    150 tokens of 3 slots over 6 experts put ~75 slots on an expert (two tiles of 64), M = 70 two blocks of rows, K
    = 72 (floats) a partial step of 32."""
    from ggpy.backends.cuda import CUDABackend
    backend = CUDABackend("cuda", force={"mul_mat_id": "grouped"})
    k = 2 * t.block if t.block == 256 else 128 if t.quantized else 72
    for used, tokens, bc in ((2, 1, True), (3, 150, False), (6, 40, True)):
        case = OpCase("mul_mat_id", f"grouped,{t.name},{used},{tokens}", lambda ctx, u=used, n=tokens, bc=bc: _mul_mat_id(
            ctx, t, k, 70, 6, u, n, bc), fill=_experts(6), max_nmse=1e-9)
        result = run_case(case, backend, seed=tokens)
        assert result.ok, result.message


@pytest.mark.parametrize("shape", [(512, 256, True), (256, 512, False)], ids=["gate", "down"])
def test_cuda_prompt_of_the_benchmark_shape(cuda_backend, shape):
    """benchmarks/arch_models.py's Qwen3-MoE shape (48 experts, top-8, width 512, expert FF 256, Q8_0) on a prompt of
    512 tokens, the default implementation (grouped): ~85 slots an expert, the products exact."""
    k, m, bc = shape
    case = OpCase("mul_mat_id", f"q8_0,K={k},M={m}", lambda ctx: _mul_mat_id(ctx, ggpy.Q8_0, k, m, 48, 8, 512, bc),
                  fill=_experts(48), max_nmse=1e-9)
    result = run_case(case, cuda_backend, seed=k)
    assert result.ok, result.message


def test_cuda_prompts_run_grouped():
    """From GROUPED_MIN_TOKENS tokens mul_mat_id runs as `grouped`, below as mmvq (quantized as) or mmv; more experts
    than moe_sort counts are refused to it. No GPU needed: the kernel table's choice."""
    from ggpy.backends.base import Backend
    from ggpy.backends.cuda import kernels  # noqa: F401 - registers the CUDA entries
    from ggpy.backends.cuda.kernels import moe
    from ggpy.backends.cuda.registry import KERNELS

    class Table(Backend):
        kind, kernels = "CUDA", KERNELS

        def __init__(self, force):
            super().__init__(None)
            self.force = self.checked_force(force)

    ctx = ggpy.Context()
    many, few = moe.GROUPED_MIN_TOKENS, moe.GROUPED_MIN_TOKENS - 1
    node = lambda t, n, experts=8: ggpy.mul_mat_id(ctx.new_tensor_3d(t, 256, 64, experts), ctx.new_tensor_3d(
        F32, 256, 1, n), ctx.new_tensor_2d(I32, 2, n))
    table = Table({})
    assert [table.impl_for(node(t, n)) for t in (ggpy.Q4_K, F16) for n in (many, few)] == [
        "grouped", "mmvq", "grouped", "mmv"]
    assert table.impl_for(node(ggpy.Q4_K, many, moe.GROUPED_MAX_EXPERTS + 1)) == "mmvq"
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot run as grouped: it takes at most 1024 experts"):
        moe.temp_size(node(F32, many, moe.GROUPED_MAX_EXPERTS + 1), "grouped", table)


def _graph(as_type, k, m, n_expert, used, tokens):
    ctx = ggpy.Context()
    as_ = ctx.new_tensor_3d(as_type, k, m, n_expert).set_name("as").set_input()
    b = ctx.new_tensor_3d(F32, k, 1, tokens).set_name("b").set_input()
    ids = ctx.new_tensor_2d(I32, used, tokens).set_name("ids").set_input()
    out = ggpy.mul_mat_id(as_, b, ids).set_name("out").set_output()
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    return graph


@pytest.mark.parametrize("backend_name", ["cpu", "cpu-grouped", "cuda", "cuda-grouped"])
@pytest.mark.parametrize("as_type", [F32, F16])
def test_only_the_chosen_experts_are_read(backend_name, as_type, request):
    """Experts no token chose hold nan: the products stay finite and equal numpy's over the chosen ones."""
    force = {"mul_mat_id": "grouped"} if backend_name.endswith("grouped") else {}
    if backend_name.startswith("cpu"):
        backend = ggpy.CPUBackend(n_threads=2, force=force)
    else:
        from ggpy.backends.cuda import CUDABackend
        backend = request.getfixturevalue("cuda_backend") and CUDABackend("cuda", force=force)
    k, m, n_expert, used, tokens = 64, 40, 8, 2, 3
    runner = ggpy.GraphRunner(_graph(as_type, k, m, n_expert, used, tokens), backend)
    rng = np.random.default_rng(7)
    ids = np.array([[1, 5], [5, 2], [2, 1]], np.int32)
    as_ = rng.uniform(-1, 1, (n_expert, m, k)).astype(as_type.dtype)
    unused = [e for e in range(n_expert) if e not in ids]
    as_[unused] = np.nan
    b = rng.uniform(-1, 1, (tokens, 1, k)).astype(np.float32)
    runner.set(**{"as": as_, "b": b, "ids": ids}).compute()
    out = runner.get("out")
    want = np.einsum("tumk,tk->tum", as_.astype(np.float64)[ids], b[:, 0].astype(np.float64))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_cpu_refuses_an_expert_out_of_range():
    runner = ggpy.GraphRunner(_graph(F32, 32, 8, 4, 2, 2), ggpy.CPUBackend(n_threads=2))
    runner.set(**{"as": np.zeros((4, 8, 32), np.float32), "b": np.zeros((2, 1, 32), np.float32),
                  "ids": np.array([[0, 1], [4, 2]], np.int32)})
    with pytest.raises(ggpy.errors.RowIndexError, match=r"mul_mat_id 'out': 1 expert id\(s\) in ids outside \[0, 4\)"):
        runner.compute()


def test_constructor_checks():
    ctx = ggpy.Context()
    as_ = ctx.new_tensor_3d(F32, 32, 8, 4)
    b, ids = ctx.new_tensor_3d(F32, 32, 1, 5), ctx.new_tensor_2d(I32, 2, 5)
    assert ggpy.mul_mat_id(as_, b, ids).ne == (8, 2, 5, 1)
    with pytest.raises(ggpy.ShapeError, match="as.ne\\[0\\]=32 .* must equal b.ne\\[0\\]=16"):
        ggpy.mul_mat_id(as_, ctx.new_tensor_3d(F32, 16, 1, 5), ids)
    with pytest.raises(ggpy.ShapeError, match="ids ne=.* does not fit b"):
        ggpy.mul_mat_id(as_, b, ctx.new_tensor_2d(I32, 2, 4))
    with pytest.raises(ggpy.ShapeError, match="ids.ne\\[0\\] a multiple of b.ne\\[1\\]"):
        ggpy.mul_mat_id(as_, ctx.new_tensor_3d(F32, 32, 3, 5), ids)
    with pytest.raises(ggpy.TypeMismatchError, match="b is f16"):
        ggpy.mul_mat_id(as_, ctx.new_tensor_3d(F16, 32, 1, 5), ids)
    with pytest.raises(ggpy.TypeMismatchError, match="'ids' has type f32"):
        ggpy.mul_mat_id(as_, b, ctx.new_tensor_2d(F32, 2, 5))


def test_cuda_grouped_zeroes_an_expert_out_of_range(cuda_backend):
    """CUDA's grouped implementation (as mmv and mmvq) writes zeros for a slot whose expert is out of range and the
    products of the others."""
    from ggpy.backends.cuda import CUDABackend
    k, m, n_expert, used, tokens = 64, 70, 4, 2, 40
    runner = ggpy.GraphRunner(_graph(F32, k, m, n_expert, used, tokens), CUDABackend("cuda", force={
        "mul_mat_id": "grouped"}))
    rng = np.random.default_rng(3)
    ids = np.stack([rng.permutation(n_expert)[:used] for _ in range(tokens)]).astype(np.int32)
    ids[5, 1], ids[17, 0] = n_expert, -1
    as_ = rng.uniform(-1, 1, (n_expert, m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (tokens, 1, k)).astype(np.float32)
    runner.set(**{"as": as_, "b": b, "ids": ids}).compute()
    out = runner.get("out").reshape(tokens, used, m)
    want = np.einsum("tumk,tk->tum", as_.astype(np.float64)[np.clip(ids, 0, n_expert - 1)], b[:, 0])
    want[5, 1], want[17, 0] = 0, 0
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
