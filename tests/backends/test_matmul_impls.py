"""mul_mat's CPU implementations, each forced: the own GEMM on every case big enough for it (and refused with a
clear error on the others), BLAS on every case; the fused bias + activation epilogue on both."""
import dataclasses

import pytest

import ggpy
from ggpy.errors import UnsupportedOpError
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.matmul import cases, epilogue_cases

CASES = [c for c in cases() if "perf" not in c.tags and c.op == "mul_mat"]


def _gemm_fits(case) -> bool:
    node = case.build(ggpy.Context())
    a = node.src[0]
    rows = node.ne[1] * (node.ne[2] * node.ne[3] if a.ne[2] * a.ne[3] == 1 else 1)
    return node.ne[0] >= 32 and a.ne[0] >= 16 and rows >= 256


GEMM_CASES = [c for c in CASES if _gemm_fits(c)]


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: c.id)
def test_gemm(case, n_threads):
    result = run_case(case, ggpy.CPUBackend(n_threads=n_threads, force={"mul_mat": "gemm"}))
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_blas(case):
    case = dataclasses.replace(case, kernel=None)       # forced: not the kernel the case expects by default
    result = run_case(case, ggpy.CPUBackend(n_threads=2, force={"mul_mat": "blas"}))
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("case", epilogue_cases(), ids=lambda c: c.id)
def test_blas_epilogue(case):
    """The bias + activation epilogue after a forced BLAS product (the same cases run fused on the own GEMM in
    test_backend_ops)."""
    case = dataclasses.replace(case, kernel="blas_s" + case.kernel)
    result = run_case(case, ggpy.CPUBackend(n_threads=2, force={"mul_mat": "blas"}))
    assert result.ok, f"{case.id}: {result.message}"


def test_gemm_chosen_for_big_products_and_refused_for_small():
    ctx = ggpy.Context()
    big = ggpy.mul_mat(ctx.new_tensor(ggpy.F32, (64, 96)), ctx.new_tensor(ggpy.F32, (64, 512)))
    small = ggpy.mul_mat(ctx.new_tensor(ggpy.F32, (64, 96)), ctx.new_tensor(ggpy.F32, (64, 20)))
    graph = ggpy.Graph().build_forward_expand(big).build_forward_expand(small)
    backend = ggpy.CPUBackend(n_threads=2)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert [r.kernel for r in plan.timeline if r.op == "mul_mat"] == ["gemm", "blas_sgemm"]
    forced = ggpy.CPUBackend(n_threads=2, force={"mul_mat": "gemm"})
    with pytest.raises(UnsupportedOpError, match="cannot run as gemm"):
        ggpy.GraphAllocator(forced).alloc_graph(ggpy.Graph().build_forward_expand(small))
