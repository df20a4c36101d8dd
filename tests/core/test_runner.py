"""GraphRunner: one graph planned once, named inputs set, evaluated and named outputs read, with the same results and
errors over one backend, a Scheduler of one backend, the fast path of a Scheduler over two, and split graphs."""
from __future__ import annotations

import numpy as np
import pytest
from runner_graph import Device, HD, M, N, build, close, input_values, reference, set_weights, weight_values

import ggpy
from ggpy.backends.cpu import CPUBackend


def targets():
    """name -> a function making (weights backend, what the runner runs on)."""
    return {"cpu": lambda: (lambda c: (c, c))(CPUBackend(n_threads=2)),
            "sched-cpu": lambda: (lambda c: (c, ggpy.Scheduler([c])))(CPUBackend(n_threads=2)),
            "sched-fast": lambda: (lambda c: (c, [Device(), c]))(CPUBackend(n_threads=2)),
            "sched-split": lambda: (lambda d: (d, [d, CPUBackend(n_threads=2)]))(Device(refuse=("soft_max",)))}


def make_runner(target: str, seed: int = 0):
    weights_backend, on = targets()[target]()
    graph, w = build(weights_backend)
    wv = weight_values(seed)
    set_weights(w, wv)
    return ggpy.GraphRunner(graph, on), wv


def run(runner, iv) -> dict:
    runner.set(ids=iv["ids"], bias=iv["bias"])
    runner.compute()
    return {k: runner.get(k) for k in ("p", "energy")}


def test_same_results_over_a_backend_and_schedulers():
    results = {}
    for target in targets():
        runner, wv = make_runner(target, seed=3)
        results[target] = [run(runner, input_values(k)) for k in range(3)]
        for k, got in enumerate(results[target]):
            ref = reference(wv, input_values(k))
            assert close(got["p"], ref["p"]) and close(got["energy"], ref["energy"]), target
    for target, runs in results.items():
        for got, want in zip(runs, results["cpu"]):
            for k in ("p", "energy"):
                assert np.allclose(got[k], want[k], rtol=1e-6, atol=1e-7), (target, k)
    assert not np.array_equal(results["cpu"][0]["p"], results["cpu"][1]["p"])


@pytest.mark.parametrize("target", list(targets()))
def test_plans_once_and_replans_when_the_graph_grows(target):
    runner, wv = make_runner(target, seed=4)
    plans = runner.plans
    for k in range(3):
        runner["ids"] = input_values(k)["ids"]
        runner[runner.inputs["bias"]] = input_values(k)["bias"]        # by Tensor as well as by name
        runner.compute()
    assert all(a is b for a, b in zip(runner.plans, plans)) and runner.plans
    h = next(t for t in runner.graph.nodes if t.name == "h")
    runner.graph.build_forward_expand(ggpy.scale(h, 2.0).set_name("h2"))
    with pytest.raises(ggpy.AllocationError, match="'ids', 'bias' not set since the graph was planned"):
        runner.compute()                     # planned again: the inputs may have moved
    iv = input_values(9)
    got = run(runner, iv)
    assert close(got["p"], reference(wv, iv)["p"])
    x = wv["emb"][iv["ids"]] @ wv["w1"].T + wv["b1"]
    gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    assert close(runner.get("h2"), 2 * gelu)


@pytest.mark.parametrize("target", ["cpu", "sched-fast"])
def test_errors_say_what_was_given_and_expected(target):
    runner, _ = make_runner(target)
    with pytest.raises(ggpy.AllocationError, match="input.*'ids', 'bias' not set"):
        runner.compute()
    with pytest.raises(ggpy.TensorNameError, match=r"input 'idx' is not one of its names; this graph's inputs: bias, ids"):
        runner.set(idx=np.zeros(N, np.int32))
    with pytest.raises(ggpy.TensorNameError, match="input 'w1' is not one of its names"):
        runner["w1"] = np.zeros((HD, 16), np.float32)                 # a weight, not an input
    with pytest.raises(ggpy.ShapeError, match=r"'bias' has ne=\(12, 5, 1, 1\).*expects an array of shape \(5, 12\).*got \(12, 5\)"):
        runner.set(bias=np.zeros((M, N), np.float32))
    with pytest.raises(ggpy.TypeMismatchError, match="'ids' is i32.*integer array, got dtype float64"):
        runner.set(ids=np.zeros(N, np.float64))
    with pytest.raises(ggpy.TensorNameError, match=r"output 'q' is not one of its names; this graph's outputs: .*energy.*p"):
        runner.get("q")
    h = next(t for t in runner.graph.nodes if t.name == "h")
    with pytest.raises(ggpy.TensorNameError, match="tensor 'h' is not an output of this graph"):
        runner.get(h)                        # an intermediate, whose memory later nodes may reuse
    with pytest.raises(ggpy.AllocationError, match="read before any compute"):
        runner.get("p")
    with pytest.raises(TypeError, match="runs a ggpy Graph"):
        runner.use(lambda: "not a graph")


def test_a_build_function_and_reserved_memory():
    """reserve plans the worst case first; graphs given to `use` later fit its buffers."""
    cpu = CPUBackend(n_threads=2)
    wv = weight_values(5)
    worst = build(cpu)[0]
    graph, w = build(cpu)
    set_weights(w, wv)
    runner = ggpy.GraphRunner(None, cpu, reserve=worst)
    buffers = list(runner.allocator.buffers)
    assert buffers and runner.graph is None
    with pytest.raises(ggpy.AllocationError, match="no graph to run yet"):
        runner.compute()
    iv = input_values(5)
    got = run(runner.use(lambda: graph), iv)
    assert runner.graph is graph and runner.allocator.buffers == buffers
    assert close(got["p"], reference(wv, iv)["p"])


def test_a_scheduler_serves_one_runner():
    cpu = CPUBackend(n_threads=2)
    sched = ggpy.Scheduler([Device(), cpu])
    first = ggpy.GraphRunner(build(cpu)[0], sched)
    ggpy.GraphRunner(build(cpu)[0], sched)
    with pytest.raises(ggpy.AllocationError, match="planned another graph since"):
        first.set(ids=np.zeros(N, np.int32))


@pytest.mark.parametrize("target", ["cpu", "sched-split"])
def test_profile_rows_name_the_graphs_nodes(target):
    runner, wv = make_runner(target, seed=6)
    iv = input_values(6)
    runner.set(ids=iv["ids"], bias=iv["bias"])
    rows = runner.profile()
    nodes = {id(n) for n in runner.graph.nodes}
    assert rows and all(id(r.node) in nodes and r.seconds >= 0 for r in rows)
    assert close(runner.get("p"), reference(wv, iv)["p"])


def test_cuda_runner_equals_cpu_runner(cuda_backend):
    runners = {}
    for name, on in (("cpu", CPUBackend(n_threads=4)), ("cuda", cuda_backend),
                     ("sched", [cuda_backend, CPUBackend(n_threads=4)])):
        graph, w = build(on if name != "sched" else on[1])
        set_weights(w, weight_values(7))
        runners[name] = ggpy.GraphRunner(graph, on)
    assert runners["sched"].sched.splits[0].inputs == [] and len(runners["sched"].sched.splits) == 1
    for k in range(3):
        iv = input_values(k)
        got = {name: run(r, iv) for name, r in runners.items()}
        ref = reference(weight_values(7), iv)
        for name in ("cuda", "sched"):
            for out in ("p", "energy"):
                assert np.allclose(got[name][out], got["cpu"][out], rtol=1e-4, atol=1e-6), (name, out)
                assert close(got[name][out], ref[out], 1e-4), (name, out)


def test_switching_back_to_a_kept_graph_plans_nothing():
    """use(A), use(B), use(A): A's plan and bound kernels are kept (nothing planned again) while the buffers hold; its
    inputs must be set again (B wrote over the memory); a graph that grows the buffers sends A to be planned again."""
    cpu = CPUBackend(n_threads=2)
    wv, iv = weight_values(7), input_values(7)
    a, w = build(cpu)
    set_weights(w, wv)
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (HD, N)).set_name("x").set_input()
    b = ggpy.Graph().build_forward_expand(ggpy.scale(ggpy.mul(x, x), 0.5).set_name("y"))
    runner = ggpy.GraphRunner(a, cpu)
    first = run(runner, iv)
    xv = np.random.default_rng(7).uniform(-1, 1, (N, HD)).astype(np.float32)
    runner.use(b).set(x=xv).compute()
    assert close(runner.get("y"), 0.5 * xv * xv)
    plans = runner.allocator.n_plans
    runner.use(a)
    assert runner.allocator.n_plans == plans
    with pytest.raises(ggpy.AllocationError, match="not set since"):
        runner.compute()
    again = run(runner, iv)
    assert runner.allocator.n_plans == plans
    assert all(np.array_equal(first[k], again[k]) for k in first)
    big = ctx.new_tensor(ggpy.F32, (HD * 64, N * 64)).set_name("big").set_input()
    runner.use(ggpy.Graph().build_forward_expand(ggpy.scale(big, 2.0)))      # the buffers grow
    runner.use(a)
    assert runner.allocator.n_plans == plans + 2
    assert close(run(runner, iv)["p"], reference(wv, iv)["p"])


def test_staged_arrays_are_the_inputs_and_outputs(cuda_backend):
    """GraphRunner.staged: inputs written into the pinned arrays count as set and are what the compute reads; the
    outputs' arrays hold the values once waited for; a CPU runner stages nothing."""
    graph, w = build(cuda_backend)
    set_weights(w, weight_values(3))
    runner = ggpy.GraphRunner(graph, cuda_backend)
    cpu_graph, cpu_w = build(CPUBackend(n_threads=2))
    assert ggpy.GraphRunner(cpu_graph, CPUBackend(n_threads=2)).staged("ids") is None
    for k in range(2):
        iv = input_values(10 + k)
        for name in ("ids", "bias"):
            runner.staged(name)[...] = np.asarray(iv[name]).reshape(runner.staged(name).shape)
        runner.compute().synchronize()
        ref = reference(weight_values(3), iv)
        for out in ("p", "energy"):
            view = runner.staged(out)
            assert view is not None and close(view.reshape(ref[out].shape), ref[out], 1e-4), out


def test_big_staged_inputs_are_copied_only_when_written(cuda_backend):
    """An input over STAGE_LIMIT (a batch of images) is copied to the device only when written since the last compute,
    not by every replay: a changed one gives the new result, an unchanged one is not copied again (values put on the
    device directly meanwhile are what the compute reads); once its pinned array is handed out (staged), every
    compute copies it."""
    n = cuda_backend.STAGE_LIMIT // 4 + 4096
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (n,)).set_name("x").set_input()
    s = ctx.new_tensor(ggpy.F32, (8,)).set_name("s").set_input()
    y = ggpy.add(ggpy.scale(x, 2.0), ggpy.sum_rows(s)).set_name("y")      # s broadcast over x
    runner = ggpy.GraphRunner(ggpy.Graph().build_forward_expand(y), cuda_backend)
    rng = np.random.default_rng(0)

    def check(xv, sv):
        assert np.allclose(runner.compute().get("y"), 2 * xv.astype(np.float64) + sv.astype(np.float64).sum(), 1e-6,
                           1e-5)
    for _ in range(2):
        xv, sv = (rng.standard_normal(k).astype(np.float32) for k in (n, 8))
        runner.set(x=xv, s=sv)
        check(xv, sv)
    for _ in range(2):                           # x not written: only the small input is copied (inside the graph)
        sv = rng.standard_normal(8).astype(np.float32)
        runner.set(s=sv)
        check(xv, sv)
    direct = rng.standard_normal(n).astype(np.float32)
    x.set(direct)                                # on the device, not through the runner: no copy overwrites it
    check(direct, sv)
    view = runner.staged("x")
    for _ in range(2):
        view[...] = xv = rng.standard_normal(n).astype(np.float32)
        check(xv, sv)
