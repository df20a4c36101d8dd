"""CPUBackend(autotune=True): the measured implementation is one of the candidates, results stay correct, the
winner is cached per shape and shown in the plan report."""
import numpy as np
import pytest

import ggpy
from ggpy import ops
from ggpy.backends.cpu import autotune
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.conv import winograd_cases
from ggpy.test_backend_ops.cases.util import layout


def _graph(build):
    ctx = ggpy.Context()
    out = build(ctx)
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    return graph, out


def _conv(ctx, how="cont"):
    return ops.conv_2d(layout(ctx, ggpy.F32, (3, 3, 24, 20)), layout(ctx, ggpy.F32, (19, 17, 24, 1), how),
                       1, 1, 1, 1, 1, 1)


@pytest.mark.parametrize("how", ["cont", "permuted"])
def test_measures_once_then_hits(how):
    backend = ggpy.CPUBackend(n_threads=2, autotune=True)
    graph, out = _graph(lambda ctx: _conv(ctx, how))
    key = autotune.shape_key(out, backend)
    autotune.WINNERS.forget(key)
    measured = autotune.WINNERS.stats["measured"]
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    impl, times = autotune.WINNERS.memory[key]
    assert set(times) == {"im2col", "winograd", "direct"}
    assert impl == min(times, key=times.get)
    assert backend.impl_for(out) == impl
    assert autotune.WINNERS.stats["measured"] == measured + 1
    assert f"conv2d_{impl}+tuned" in plan.report()
    assert (out.temp[2] if out.temp is not None else 0) == backend.temp_size(out)

    hits = autotune.WINNERS.stats["hits"]
    graph2, out2 = _graph(lambda ctx: _conv(ctx, how))
    ggpy.GraphAllocator(backend).alloc_graph(graph2)
    assert autotune.WINNERS.stats["measured"] == measured + 1
    assert autotune.WINNERS.stats["hits"] > hits
    assert backend.impl_for(out2) == impl


def test_one_candidate_is_not_measured():
    """A 5x5 conv_1d can only run as im2col or direct; a 3x3 stride-2 conv_2d not as winograd or gemm_1x1."""
    backend = ggpy.CPUBackend(n_threads=2, autotune=True)
    graph, out = _graph(lambda ctx: ops.conv_2d(layout(ctx, ggpy.F32, (3, 3, 8, 8)),
                                                layout(ctx, ggpy.F32, (16, 16, 8, 1)), 2, 2, 1, 1, 1, 1))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert set(autotune.WINNERS.memory[autotune.shape_key(out, backend)][1]) == {"im2col", "direct"}


def test_forced_op_is_not_measured():
    backend = ggpy.CPUBackend(n_threads=2, autotune=True, force={"conv_2d": "im2col"})
    graph, out = _graph(_conv)
    key = autotune.shape_key(out, backend)
    autotune.WINNERS.memory.pop(key, None)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert key not in autotune.WINNERS.memory
    assert backend.kernel_name(out) == "conv2d_im2col"


@pytest.mark.parametrize("case", winograd_cases()[::5], ids=lambda c: c.id)
def test_results_stay_correct(case):
    result = run_case(case, ggpy.CPUBackend(n_threads=2, autotune=True))
    assert result.ok, f"{case.id}: {result.message}"


def test_live_buffers_untouched():
    """Measuring runs on arrays of its own: a planned graph's input and output bytes stay as they were."""
    graph, out = _graph(_conv)
    ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=2)).alloc_graph(graph)
    b = out.src[1]
    x = np.arange(np.prod(b.ne), dtype=np.float32).reshape(tuple(reversed(b.ne)))
    b.set(x)
    before = out.buffer.kernel_view(out).copy()
    tuning = ggpy.CPUBackend(n_threads=2, autotune=True)
    autotune.WINNERS.forget(autotune.shape_key(out, tuning))
    measured = autotune.WINNERS.stats["measured"]
    tuning.impl_for(out)
    assert autotune.WINNERS.stats["measured"] == measured + 1
    np.testing.assert_array_equal(b.numpy().reshape(x.shape), x)
    np.testing.assert_array_equal(out.buffer.kernel_view(out), before)


def test_winners_persist_on_disk(tmp_path, monkeypatch):
    """A second process (here: the in-memory table emptied) reads the winner from the disk cache and measures
    nothing; the cache file is per machine."""
    monkeypatch.setenv("GGPY_AUTOTUNE_CACHE", str(tmp_path))
    backend = ggpy.CPUBackend(n_threads=2, autotune=True)
    graph, out = _graph(lambda ctx: _conv(ctx))
    key = autotune.shape_key(out, backend)
    autotune.WINNERS.memory.pop(key, None)
    measured = autotune.WINNERS.stats["measured"]
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert autotune.WINNERS.stats["measured"] == measured + 1
    winner = autotune.WINNERS.memory[key][0]
    assert autotune.WINNERS.path().parent == tmp_path and autotune.WINNERS.path().exists()
    autotune.WINNERS.memory.clear()
    disk_hits = autotune.WINNERS.stats["disk_hits"]
    graph2, out2 = _graph(lambda ctx: _conv(ctx))
    ggpy.GraphAllocator(backend).alloc_graph(graph2)
    assert autotune.WINNERS.stats["measured"] == measured + 1 and autotune.WINNERS.stats["disk_hits"] == disk_hits + 1
    assert backend.impl_for(out2) == winner
