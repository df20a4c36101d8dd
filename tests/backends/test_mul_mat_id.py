"""mul_mat_id beyond the test-backend-ops cases: the CPU's exact implementation (dot) on every weight type, only the
chosen experts' rows read (the others hold nan), an expert id out of range, the constructor's checks."""
from __future__ import annotations

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.moe import _experts, _mul_mat_id
from ggpy.test_backend_ops.harness import OpCase
from ggpy.types import F16, F32, I32, QUANT_TYPES


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
def test_cpu_dot_is_exact(t):
    """The dot implementation: float32 dot products of the dequantized rows (a row one slot chose: quants.DOT)."""
    backend = ggpy.CPUBackend(n_threads=2, force={"mul_mat_id": "dot"})
    for used, tokens in ((2, 1), (3, 5)):
        case = OpCase("mul_mat_id", f"dot,{t.name},{used},{tokens}", lambda ctx, u=used, n=tokens: _mul_mat_id(
            ctx, t, 2 * t.block if t.block == 256 else 128, 24, 6, u, n, False), fill=_experts(6), max_nmse=1e-9,
            kernel=f"dot_id_{t.name}")
        result = run_case(case, backend, seed=used)
        assert result.ok, result.message


def _graph(as_type, k, m, n_expert, used, tokens):
    ctx = ggpy.Context()
    as_ = ctx.new_tensor_3d(as_type, k, m, n_expert).set_name("as").set_input()
    b = ctx.new_tensor_3d(F32, k, 1, tokens).set_name("b").set_input()
    ids = ctx.new_tensor_2d(I32, used, tokens).set_name("ids").set_input()
    out = ggpy.mul_mat_id(as_, b, ids).set_name("out").set_output()
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    return graph


@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
@pytest.mark.parametrize("as_type", [F32, F16])
def test_only_the_chosen_experts_are_read(backend_name, as_type, request):
    """Experts no token chose hold nan: the products stay finite and equal numpy's over the chosen ones."""
    backend = ggpy.CPUBackend(n_threads=2) if backend_name == "cpu" else request.getfixturevalue("cuda_backend")
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
