"""The Scheduler's one-backend fast path: a graph that one backend runs whole is one split whose inputs live in that
backend's memory, so a compute copies nothing through the host. CPU cases use a second CPU backend ("dev", first in
priority) standing in for a device; the CUDA cases skip without a GPU."""
from __future__ import annotations

import numpy as np
import pytest
from runner_graph import Device, build, close, input_values, reference, set_weights, weight_values

import ggpy
import ggpy.sched.scheduler as scheduler_module
from ggpy.backends.cpu import CPUBackend


@pytest.fixture
def copies(monkeypatch):
    """Every copy the Scheduler makes between backends' memories, as (source name, destination name)."""
    made = []
    copy = scheduler_module._copy

    def counted(src, dst):
        made.append((src.name, dst.name))
        copy(src, dst)
    monkeypatch.setattr(scheduler_module, "_copy", counted)
    return made


def run_three(sched, graph, seed=0) -> list:
    """Compute on three random inputs; [(inputs, {"p", "energy"})]."""
    out = []
    for k in range(3):
        iv = input_values(seed + k)
        graph_inputs = {t.name: t for t in graph.leafs if t.is_input}
        graph_inputs["ids"].set(iv["ids"])
        graph_inputs["bias"].set(iv["bias"].astype(np.float32))
        sched.compute(graph)
        out.append((iv, {t.name: t.numpy() for t in graph.nodes if t.name in ("p", "energy")}))
    return out


def allocator_results(backend, wv, runs) -> list:
    """The same graph through GraphAllocator + backend.compute, on the inputs of `runs`."""
    graph, w = build(backend)
    set_weights(w, wv)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    named = {t.name: t for t in graph.leafs + graph.nodes}
    out = []
    for iv, _ in runs:
        named["ids"].set(iv["ids"])
        named["bias"].set(iv["bias"].astype(np.float32))
        backend.compute(graph)
        out.append({k: named[k].numpy() for k in ("p", "energy")})
    return out


def test_one_backend_graph_is_one_split_with_its_inputs_in_that_backend(copies):
    dev, cpu = Device(), CPUBackend(n_threads=2)
    wv = weight_values(1)
    graph, w = build(cpu)                      # weights in host memory: uploaded to dev once
    set_weights(w, wv)
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(graph)
    inputs = [t for t in graph.leafs if t.is_input]
    assert [sp.backend for sp in sched.splits] == [dev] and sched.splits[0].inputs == []
    for x in inputs:
        assert sched.get_backend(x) is dev
        assert any(x.buffer is b for b in sched.allocators[dev].buffers), x.name
    runs = run_three(sched, graph)
    assert sched.n_copies == 0 and sched.n_uploads == 4
    assert sorted(copies) == sorted((n, f"{n}#dev") for n in ("emb", "w1", "b1", "w2"))   # the weights, once
    for (iv, got), want in zip(runs, allocator_results(dev, wv, runs)):
        ref = reference(wv, iv)
        for k in ("p", "energy"):
            assert np.array_equal(got[k], want[k]), k
            assert close(got[k], ref[k]), k
    assert len({r[1]["p"].tobytes() for r in runs}) == 3       # three different inputs, three different results
    dump = sched.dump()
    assert dump.startswith("scheduler: 1 split(s) over dev, cpu; 0 copies per compute")
    assert "input ids i32[5, 1, 1, 1] in dev" in dump and "split 0: dev" in dump


def test_pinned_input_stays_and_is_copied(copies):
    """A pin still decides: an input pinned to the host is copied to the backend that runs the graph."""
    dev, cpu = Device(), CPUBackend(n_threads=2)
    wv = weight_values(2)
    graph, w = build(dev)
    set_weights(w, wv)
    sched = ggpy.Scheduler([dev, cpu])
    bias = next(t for t in graph.leafs if t.name == "bias")
    sched.set_backend(bias, cpu)
    sched.alloc_graph(graph)
    assert [s.name for s, _ in sched.splits[0].inputs] == ["bias"] and sched.get_backend(bias) is cpu
    runs = run_three(sched, graph, seed=5)
    assert sched.n_copies == 3 and copies == [("bias", "bias#dev")] * 3
    for iv, got in runs:
        assert close(got["p"], reference(wv, iv)["p"])


def test_split_graph_keeps_its_inputs_on_the_host(copies):
    """With two splits the inputs stay on the host (the last backend) and are copied to the split reading them."""
    dev, cpu = Device(refuse=("soft_max",)), CPUBackend(n_threads=2)
    wv = weight_values(3)
    graph, w = build(dev)
    set_weights(w, wv)
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(graph)
    assert [sp.backend for sp in sched.splits] == [dev, cpu, dev]
    assert all(sched.get_backend(t) is cpu for t in graph.leafs if t.is_input)
    assert [s.name for s, _ in sched.splits[0].inputs] == ["ids", "bias"]
    for iv, got in run_three(sched, graph, seed=7):
        ref = reference(wv, iv)
        assert close(got["p"], ref["p"]) and close(got["energy"], ref["energy"])


def test_cuda_one_backend_graph_inputs_in_device_memory(cuda_backend, copies):
    cpu = CPUBackend(n_threads=4)
    wv = weight_values(4)
    graph, w = build(cpu)                      # host weights: every node still runs on CUDA
    set_weights(w, wv)
    sched = ggpy.Scheduler([cuda_backend, cpu])
    sched.alloc_graph(graph)
    print(sched.dump())
    assert [sp.backend for sp in sched.splits] == [cuda_backend] and sched.splits[0].inputs == []
    for x in (t for t in graph.leafs if t.is_input):
        assert x.buffer.buffer_type is cuda_backend.buffer_type, x.name
    runs = run_three(sched, graph, seed=11)
    assert sched.n_copies == 0 and len(copies) == 4
    for (iv, got), want in zip(runs, allocator_results(cuda_backend, wv, runs)):
        ref = reference(wv, iv)
        for k in ("p", "energy"):
            assert np.allclose(got[k], want[k], rtol=1e-6, atol=1e-7), k
            assert close(got[k], ref[k], 1e-4), k
