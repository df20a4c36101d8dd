"""The norm_mat_vec fusion (ggpy/graph/fusion.py; CUDA: kernels/matmul.py's norm_mat_vec_run, quant_norm.cu): what the
finder takes and refuses; the planner giving the products' blocks at the norm's turn (on the CPU, with a backend that
declares the pattern but runs its nodes one by one); on CUDA the fused launches (q, k, v; gate / up; a big head) against
the unfused float64 graph (test-backend-ops' norm_mat_vec cases) and that they ran. CUDA tests skip without a GPU."""
import re

import pytest

import ggpy
from ggpy.backends.cuda.kernels import quant
from ggpy.backends.kernel import Fused
from ggpy.graph.fusion import NormMatVec, find_fusions
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.matmul import norm_mat_vec_cases

CASES = norm_mat_vec_cases()


def _graph(glu=False, read_h=None, h_output=False):
    """rms_norm(x) * w = h read by q, k, v (or gate / up with silu * up); read_h(h) adds another reader of h."""
    ctx = ggpy.Context()
    h = ggpy.mul(ggpy.rms_norm(ctx.new_tensor(ggpy.F32, (64, 1)), 1e-6), ctx.new_tensor(ggpy.F32, (64,)))
    ys = [ggpy.mul_mat(ctx.new_tensor(ggpy.Q4_0, (64, m)), h).set_name(f"y{i}") for i, m in enumerate((64, 32, 32))]
    if glu:
        out = ggpy.mul(ggpy.silu(ys[0]), ggpy.mul_mat(ctx.new_tensor(ggpy.Q4_0, (64, 64)), h))
    else:
        out = ggpy.concat(ggpy.concat(ys[0], ys[1], 0), ys[2], 0)
    if read_h is not None:
        out = ggpy.concat(out, read_h(h), 0)
    if h_output:
        h.set_output()
    return ggpy.Graph().build_forward_expand(out), h, ys


def _found(graph):
    spec = Fused(None)
    found = find_fusions(graph, lambda node, p: spec if p in ("norm_mat_vec", "glu") else None)
    return [f for f in found.values() if isinstance(f, NormMatVec)]


def test_finds_the_products_and_the_glu():
    graph, h, ys = _graph()
    (f,) = _found(graph)
    assert f.products == tuple(ys) and f.glu is None and f.early == [h, *ys] and set(f.skipped) == {h, *ys}
    graph, h, ys = _graph(glu=True)
    (f,) = _found(graph)
    assert f.glu is not None and f.glu.gate is ys[0] and f.outputs == [graph.nodes[-1]] and f.early == [h, f.glu.mul]


@pytest.mark.parametrize("how", ["other reader", "product of h as a", "h an output"])
def test_refuses_an_h_read_otherwise(how):
    read = {"other reader": lambda h: ggpy.scale(h, 2.0),
            "product of h as a": lambda h: ggpy.mul_mat(h, h)}.get(how)
    graph, _, _ = _graph(read_h=read, h_output=how == "h an output")
    assert _found(graph) == []


class Declares(ggpy.CPUBackend):
    """The CPU declaring norm_mat_vec (found, planned with its early blocks) whose kernel declines: nodes one by one."""

    def fused(self, node, pattern):
        return Fused(lambda bound, f: None) if pattern == "norm_mat_vec" else super().fused(node, pattern)

    def fused_kernel(self, fusion):
        return Fused(lambda bound, f: None) if fusion.pattern == "norm_mat_vec" else super().fused_kernel(fusion)


@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: c.id)
def test_planner_gives_the_results_their_blocks_at_the_norms_turn(case):
    backend = Declares(n_threads=2)
    result = run_case(case, backend)
    assert result.ok, result.message
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    (f,) = [f for f in backend.fusions(graph).values() if isinstance(f, NormMatVec)]
    turn = 3 * graph.nodes.index(f.head)
    starts = {b.what: b.start for b in graph.plan.blocks}
    for t in f.early:
        pos = len(graph.leafs) + graph.nodes.index(t)
        assert starts[f"{t.op} #{pos}"] == turn


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cuda_fused_against_the_unfused_graph(cuda_backend, case):
    result = run_case(case, cuda_backend)
    assert result.ok, f"{case.id}: {result.message}"
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    names = [s.name for s in cuda_backend.program(graph)]
    (f,) = [f for f in cuda_backend.fusions(graph).values() if isinstance(f, NormMatVec)]
    launches = 1 if all(map(quant.mmvq_shared, f.products)) else 2 if f.glu else 1 + len(f.products)
    assert names[0] == f.name("rms_norm_f32") and re.fullmatch(r"rms_norm_f32\+mul\+(glu_silu|mat_vec\d)", names[0])
    assert len(names) == launches + (0 if f.glu else len(f.products) - 1), names        # + the concats
    assert not any(n.startswith(("rms_norm", "quantize")) for n in names[1:]), names
