"""conv_2d's CPU implementations, each forced on the cases it can run, the im2col scratch cap, and one
conv against PyTorch."""
import numpy as np
import pytest

import ggpy
from ggpy import ops
from ggpy.errors import UnsupportedOpError
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.conv import cases, conv_2d_cases, winograd_cases

GENERAL = conv_2d_cases(False)
ONE_BY_ONE = conv_2d_cases(True)
WINOGRAD = winograd_cases()
CONV_1D = [c for c in cases() if c.op == "conv_1d"]


def _check(case, backend):
    result = run_case(case, backend)
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("impl", ["im2col", "direct"])
@pytest.mark.parametrize("case", GENERAL + ONE_BY_ONE + WINOGRAD, ids=lambda c: c.id)
def test_general_impls(case, impl):
    _check(case, ggpy.CPUBackend(n_threads=2, force={"conv_2d": impl}))


@pytest.mark.parametrize("case", ONE_BY_ONE, ids=lambda c: c.id)
def test_gemm_1x1(case):
    _check(case, ggpy.CPUBackend(n_threads=2, force={"conv_2d": "gemm_1x1"}))


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("case", WINOGRAD, ids=lambda c: c.id)
def test_winograd(case, n_threads):
    _check(case, ggpy.CPUBackend(n_threads=n_threads, force={"conv_2d": "winograd"}))


@pytest.mark.parametrize("case", WINOGRAD[::4], ids=lambda c: c.id)
def test_winograd_tiny_budget(case):
    """A budget below the transformed kernel: one tile per worker at a time, still correct."""
    _check(case, ggpy.CPUBackend(n_threads=2, force={"conv_2d": "winograd"}, scratch_budget=64))


@pytest.mark.parametrize("impl", ["im2col", "direct"])
@pytest.mark.parametrize("case", CONV_1D, ids=lambda c: c.id)
def test_conv_1d_impls(case, impl):
    _check(case, ggpy.CPUBackend(n_threads=2, force={"conv_1d": impl}))


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("case", GENERAL[::3], ids=lambda c: c.id)
def test_im2col_tiny_budget_many_tiles(case, n_threads):
    """A budget below one output row: the kernel still works, one row (or less per worker) at a time."""
    _check(case, ggpy.CPUBackend(n_threads=n_threads, force={"conv_2d": "im2col"}, scratch_budget=64))


def _plan(backend, ne_a, ne_b, **params):
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F16, ne_a).set_input()
    b = ctx.new_tensor(ggpy.F32, ne_b).set_input()
    out = ops.conv_2d(a, b, **params)
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    return graph, plan, out


def test_big_image_scratch_stays_under_budget():
    budget = 16 << 20
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d": "im2col"}, scratch_budget=budget)
    _, plan, out = _plan(backend, (3, 3, 3, 32), (1024, 1024, 3, 1), p0=1, p1=1)
    full = 1024 * 1024 * 27 * 4
    assert full > budget
    assert 0 < out.temp[2] <= budget
    assert plan.timeline[-1].temp_bytes <= budget
    report = plan.report()
    assert "conv2d_im2col" in report, report


def test_default_choice_and_names():
    backend = ggpy.CPUBackend(n_threads=2)
    for ne_a, ne_b, params, name in [((2, 2, 1, 8), (16, 16, 1, 1), {}, "conv2d_direct"),
                                     ((3, 3, 3, 8), (16, 16, 3, 1), {}, "conv2d_im2col"),
                                     ((1, 1, 16, 8), (16, 16, 16, 1), {}, "conv2d_gemm_1x1"),
                                     ((3, 3, 16, 8), (16, 16, 16, 1), {"p0": 1}, "conv2d_im2col"),
                                     ((3, 3, 32, 24), (32, 32, 32, 1), {"p0": 1, "p1": 1}, "conv2d_winograd"),
                                     ((3, 3, 32, 24), (8, 8, 32, 1), {"p0": 1, "p1": 1}, "conv2d_im2col"),
                                     ((3, 3, 32, 24), (32, 32, 32, 1), {"s0": 2}, "conv2d_im2col")]:
        _, plan, out = _plan(backend, ne_a, ne_b, **params)
        assert backend.kernel_name(out) == name
        assert name in plan.report()
    assert backend.temp_size(_plan(backend, (2, 2, 1, 8), (16, 16, 1, 1))[2]) == 0


def test_gemm_1x1_refuses_other_kernels():
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d": "gemm_1x1"})
    with pytest.raises(UnsupportedOpError, match="gemm_1x1"):
        _plan(backend, (3, 3, 4, 4), (8, 8, 4, 1))


@pytest.mark.parametrize("ne_a, params", [((3, 3, 4, 4), {"s0": 2}), ((3, 3, 4, 4), {"d1": 2}),
                                          ((5, 3, 4, 4), {}), ((1, 1, 4, 4), {})])
def test_winograd_refuses_other_kernels(ne_a, params):
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d": "winograd"})
    with pytest.raises(UnsupportedOpError, match="winograd"):
        _plan(backend, ne_a, (8, 8, 4, 1), **params)


def test_winograd_scratch():
    """The temp block holds the transformed kernel (16 x Cin x Cout floats) and stays under the budget."""
    budget = 4 << 20
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d": "winograd"}, scratch_budget=budget)
    _, plan, out = _plan(backend, (3, 3, 160, 160), (64, 64, 160, 1), p0=1, p1=1)
    assert 16 * 160 * 160 * 4 < out.temp[2] <= budget
    assert "conv2d_winograd" in plan.report()


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 10, 3, 5)).astype(np.float32)     # (OC, IC, KH, KW)
    x = rng.standard_normal((2, 10, 21, 17)).astype(np.float32)    # (N, IC, H, W)
    for impl in ("im2col", "direct"):
        got, want = _conv_vs_torch(torch, impl, w, x, (2, 1, 2, 1, 1, 2))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    w3 = rng.standard_normal((12, 10, 3, 3)).astype(np.float32)
    got, want = _conv_vs_torch(torch, "winograd", w3, x, (1, 1, 1, 2, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _conv_vs_torch(torch, impl, w, x, params):
    """ggpy's conv_2d forced to `impl` and torch's conv2d of kernel w (OC, IC, KH, KW), input x (N, IC, H, W);
    params (s0, s1, p0, p1, d0, d1)."""
    s0, s1, p0, p1, d0, d1 = params
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d": impl})
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, tuple(reversed(w.shape))).set_input()
    b = ctx.new_tensor(ggpy.F32, tuple(reversed(x.shape))).set_input()
    out = ops.conv_2d(a, b, *params)
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(w)
    b.set(x)
    backend.compute(graph)
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=(s1, s0), padding=(p1, p0),
                                      dilation=(d1, d0)).numpy()
    return out.numpy().reshape(want.shape), want
