"""benchmarks/kernel_costs.py: the bytes and operations of a profiled step, fused or not, counted by hand."""
import sys
from pathlib import Path

import numpy as np

import ggpy
from ggpy.backends.base import Timing

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from kernel_costs import cost_table, kernel_costs, peaks_of  # noqa: E402

K, M, N = 64, 32, 100


def _planned(fuse: bool):
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F16, (K, M)).set_input()
    x = ctx.new_tensor(ggpy.F32, (K, N)).set_input()
    b = ctx.new_tensor(ggpy.F32, (M,)).set_input()
    out = ggpy.gelu_erf(ggpy.add(ggpy.mul_mat(w, x), b))
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=1, fuse=fuse)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(0)
    for t in (w, x, b):
        t.set(rng.standard_normal(tuple(reversed(t.ne))).astype(np.float32))
    return backend, graph


def test_a_fused_epilogue_reads_its_operands_once_and_writes_the_last_node():
    backend, graph = _planned(fuse=True)
    timings = backend.profile(graph)
    assert len(timings) == 1                    # sgemm + bias + GELU: one kernel
    costs = kernel_costs(backend, graph, timings)
    (c,) = costs.values()
    assert c.bytes == K * M * 2 + K * N * 4 + M * 4 + M * N * 4      # W (F16), x, b read; the GELU's result written
    assert c.flops == 2 * K * M * N + 2 * M * N and c.steps == 1 and c.seconds > 0


def test_unfused_steps_write_what_the_next_reads():
    backend, graph = _planned(fuse=False)
    costs = kernel_costs(backend, graph, [Timing(n, n.op, 1e-3) for n in graph.nodes])
    assert costs["mul_mat"].bytes == K * M * 2 + K * N * 4 + M * N * 4
    assert costs["add"].bytes == M * N * 4 * 2 + M * 4 and costs["gelu_erf"].bytes == M * N * 4 * 2
    assert costs["mul_mat"].flops == 2 * K * M * N and costs["gelu_erf"].flops == M * N
    table = cost_table(costs, peaks_of("NVIDIA H200"), "f32", per=2)
    assert "| mul_mat | 1 | 0.500 |" in table and peaks_of("a CPU") is None


def test_a_pattern_the_backend_ran_node_by_node_is_costed_by_its_nodes():
    """Where a found pattern's nodes ran as steps of their own (a backend declining it at run time), each counts once."""
    backend, graph = _planned(fuse=True)
    assert backend.fusions(graph)
    rows = [Timing(n, n.op, 1e-3) for n in graph.nodes] + [Timing(graph.nodes[0], "mul_mat", 1e-3), Timing(None, "x", 1)]
    costs = kernel_costs(backend, graph, rows)
    assert costs["mul_mat"].bytes == K * M * 2 + K * N * 4 + M * N * 4 and costs["mul_mat"].steps == 2
    assert costs["add"].bytes == M * N * 4 * 2 + M * 4 and costs["x"].bytes == 0 and costs["x"].seconds == 1


def test_a_step_of_several_launches_is_costed_at_its_longest():
    """A node run as several launches (im2col, then the GEMM) has its bytes and FLOP on its longest launch's row; the
    others add time only."""
    backend, graph = _planned(fuse=False)
    mm = graph.nodes[0]
    rows = [Timing(mm, "im2col", 1e-4), Timing(mm, "gemm", 5e-4)] + [Timing(n, n.op, 1e-3) for n in graph.nodes[1:]]
    costs = kernel_costs(backend, graph, rows)
    assert costs["gemm"].flops == 2 * K * M * N and costs["gemm"].bytes == K * M * 2 + K * N * 4 + M * N * 4
    assert costs["im2col"].flops == costs["im2col"].bytes == 0 and costs["im2col"].seconds == 1e-4
