"""The Scheduler: graphs split across backends. CPU-only cases (a scheduler with just the CPU, and a CPU with a
second, restricted CPU backend standing in for a device) run everywhere; CUDA + CPU cases skip without a GPU."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ggpy
from ggpy.backends.cpu import CPUBackend


class Restricted(CPUBackend):
    """A CPU backend that refuses some ops, standing in for a device without them."""

    def __init__(self, refuse=("soft_max",), name="dev"):
        super().__init__(n_threads=2)
        self.refuse = tuple(refuse)
        self.name = name

    def supports_op(self, node) -> bool:
        return node.op not in self.refuse and super().supports_op(node)


C, W, H = 8, 6, 5


def build_block(ctx, values=None):
    """A small MobileSAM-like block: depthwise conv, tokens, norm + affine, attention, projection, gelu.
    Returns (x, weights dict, output)."""
    x = ctx.new_tensor(ggpy.F32, (W, H, C, 1)).set_input().set_name("x")
    k = ctx.new_tensor(ggpy.F32, (3, 3, 1, C)).set_name("k")
    gamma = ctx.new_tensor(ggpy.F32, (C,)).set_name("gamma")
    beta = ctx.new_tensor(ggpy.F32, (C,)).set_name("beta")
    wq = ctx.new_tensor(ggpy.F32, (C, C)).set_name("wq")
    wo = ctx.new_tensor(ggpy.F32, (W * H, 4)).set_name("wo")
    dw = ggpy.conv_2d_dw(k, x, 1, 1, 1, 1).set_name("dw")
    tok = ggpy.reshape_2d(ggpy.cont(ggpy.permute(dw, 1, 2, 0, 3)), C, W * H).set_name("tok")
    n = ggpy.add(ggpy.mul(ggpy.norm(tok, 1e-5), gamma), beta).set_name("n")
    q = ggpy.mul_mat(wq, n).set_name("q")
    kq = ggpy.mul_mat(q, n).set_name("kq")
    sm = ggpy.soft_max_ext(kq, None, 0.3).set_name("sm")
    y = ggpy.gelu(ggpy.mul_mat(wo, sm)).set_name("y")
    return x, {"k": k, "gamma": gamma, "beta": beta, "wq": wq, "wo": wo}, y


def make_values(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1, 1, (1, C, H, W)), "k": rng.uniform(-1, 1, (C, 1, 3, 3)),
            "gamma": rng.uniform(0.5, 1.5, C), "beta": rng.uniform(-0.5, 0.5, C), "wq": rng.uniform(-1, 1, (C, C)),
            "wo": rng.uniform(-1, 1, (4, W * H))}


def reference(v) -> np.ndarray:
    x = v["x"][0]
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    dw = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            dw += v["k"][:, 0, i, j][:, None, None] * xp[:, i:i + H, j:j + W]
    tok = dw.transpose(1, 2, 0).reshape(W * H, C)
    mu = tok.mean(1, keepdims=True)
    n = (tok - mu) / np.sqrt(((tok - mu) ** 2).mean(1, keepdims=True) + 1e-5) * v["gamma"] + v["beta"]
    q = n @ v["wq"].T
    kq = 0.3 * (n @ q.T)
    sm = np.exp(kq - kq.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    z = sm @ v["wo"].T
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))


def setup(weights_backend, values, all_outputs=False):
    ctx = ggpy.Context()
    x, ws, y = build_block(ctx)
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    if all_outputs:
        for node in graph.nodes:
            node.set_output()
    ggpy.alloc_ctx_tensors(ctx, weights_backend)
    for name, t in ws.items():
        t.set(values[name].astype(np.float32))
    return x, graph, y


def run_single(backend, values):
    x, graph, y = setup(backend, values)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    x.set(values["x"].astype(np.float32))
    backend.compute(graph)
    return y.numpy()


def rel_err(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# -- CPU only ----------------------------------------------------------------------------------------------
def test_cpu_only_scheduler_matches_single_backend():
    cpu = CPUBackend(n_threads=2)
    v = make_values()
    single = run_single(cpu, v)
    x, graph, y = setup(cpu, v)
    sched = ggpy.Scheduler([cpu])
    sched.alloc_graph(graph)
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    assert len(sched.splits) == 1 and not sched.splits[0].inputs
    assert np.array_equal(y.numpy(), single)
    assert rel_err(y.numpy(), reference(v)) < 1e-5


def test_fallback_copies_at_both_boundaries_and_weights_uploaded_once():
    dev, cpu = Restricted(("soft_max",)), CPUBackend(n_threads=2)
    v = make_values(1)
    x, graph, y = setup(cpu, v)                      # weights in host memory: uploaded to `dev` once
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(graph)
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    first = y.numpy()
    sched.compute(graph)
    assert [sp.backend.name for sp in sched.splits] == ["dev", "cpu", "dev"]
    assert [n.op for n in sched.splits[1].nodes] == ["soft_max"]
    assert [s.name for s, _ in sched.splits[1].inputs] == ["kq"]          # dev -> cpu
    assert [s.name for s, _ in sched.splits[2].inputs] == ["sm"]          # cpu -> dev
    assert [s.name for s, _ in sched.splits[0].inputs] == ["x"]           # the host input
    assert sched.n_uploads == 5                                            # k, gamma, beta, wq, wo: once
    assert sched.n_copies == 6                                             # 3 per compute
    assert np.array_equal(y.numpy(), first)
    assert rel_err(first, reference(v)) < 1e-5
    assert all(a.n_plans <= 1 for a in sched.allocators.values())


def test_user_tensors_untouched():
    """The scheduler evaluates its own wiring: the user's nodes keep their sources and flags across splits and
    copies (only their memory is set, so that results can be read)."""
    dev, cpu = Restricted(("soft_max",)), CPUBackend(n_threads=2)
    v = make_values(2)
    x, graph, y = setup(cpu, v)
    before = [(n, list(n.src), n.flags) for n in graph.nodes]
    seen = []                                   # the user's wiring as it is while a split computes
    compute = cpu.compute
    cpu.compute = lambda g: (seen.append([(list(n.src), n.flags) for n, _, _ in before]), compute(g))
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(graph)
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    assert len(sched.splits) == 3 and any(sp.inputs for sp in sched.splits) and seen
    for wiring in seen + [[(n.src, n.flags) for n, _, _ in before]]:
        for (src, flags), (n, src0, flags0) in zip(wiring, before):
            assert all(a is b for a, b in zip(src, src0)) and flags == flags0, n.name
    assert rel_err(y.numpy(), reference(v)) < 1e-5


def test_weights_pull_their_nodes():
    """With offload_host_weights=False, weights in the CPU's memory keep their nodes on the CPU."""
    dev, cpu = Restricted(("soft_max",)), CPUBackend(n_threads=2)
    v = make_values(2)
    x, graph, y = setup(cpu, v)
    sched = ggpy.Scheduler([dev, cpu], offload_host_weights=False)
    sched.alloc_graph(graph)
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    byname = {n.name: sched.get_backend(n) for n in graph.nodes if n.name}
    assert byname["dw"] is cpu and byname["q"] is cpu and byname["n"] is cpu and sched.get_backend(y.src[0]) is cpu
    assert byname["kq"] is dev and byname["y"] is dev          # no weight: back to the first backend
    assert sched.n_uploads == 0
    assert rel_err(y.numpy(), reference(v)) < 1e-5


def test_pinning_with_block_and_set_backend():
    dev, cpu = Restricted(()), CPUBackend(n_threads=2)
    v = make_values(3)
    ctx = ggpy.Context()
    sched = ggpy.Scheduler([dev, cpu])
    x = ctx.new_tensor(ggpy.F32, (W, H, C, 1)).set_input().set_name("x")
    a = ggpy.scale(x, 2.0).set_name("a")
    with sched.on(cpu):
        b = ggpy.gelu(a).set_name("b")
        c = ggpy.add(b, a).set_name("c")
    d = ggpy.sqr(c).set_name("d")
    e = ggpy.neg(d).set_name("e")
    sched.set_backend(e, cpu)
    graph = ggpy.Graph()
    graph.build_forward_expand(e)
    sched.alloc_graph(graph)
    assert [sched.get_backend(t).name for t in (a, b, c, d, e)] == ["dev", "cpu", "cpu", "dev", "cpu"]
    assert [sp.backend.name for sp in sched.splits] == ["dev", "cpu", "dev", "cpu"]
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    xa = 2 * v["x"]
    gb = 0.5 * xa * (1 + np.tanh(np.sqrt(2 / np.pi) * (xa + 0.044715 * xa ** 3)))
    assert rel_err(e.numpy(), -((gb + xa) ** 2)) < 1e-5
    dump = sched.dump()
    assert "split 1: cpu" in dump and "(pinned)" in dump and "copy  a f32" in dump
    ctx2 = ggpy.Context()
    with pytest.raises(ValueError, match="not one of this scheduler's"), sched.on(CPUBackend(n_threads=1)):
        ggpy.relu(ctx2.new_tensor(ggpy.F32, (4,)))


def test_pinning_block_is_local_to_its_thread_and_nests():
    """`with sched.on(b)` pins what this thread makes inside the block, the innermost block winning; a tensor
    another thread makes meanwhile stays unpinned."""
    dev, cpu = Restricted(()), CPUBackend(n_threads=2)
    sched = ggpy.Scheduler([dev, cpu])
    x = ggpy.Context().new_tensor(ggpy.F32, (8,))
    made = {}
    with sched.on(dev):
        outer = ggpy.relu(x)
        with sched.on(cpu):
            inner = ggpy.neg(x)
        thread = threading.Thread(target=lambda: made.setdefault("t", ggpy.sqr(x)))
        thread.start()
        thread.join()
    after = ggpy.abs(x)
    assert sched.get_backend(outer) is dev and sched.get_backend(inner) is cpu
    assert sched.get_backend(made["t"]) is None and sched.get_backend(after) is None


def test_plan_dump_and_plans_reused():
    dev, cpu = Restricted(("soft_max",)), CPUBackend(n_threads=2)
    v = make_values(4)
    sched = ggpy.Scheduler([dev, cpu])
    outs = []
    for _ in range(2):                               # a second, equal graph replays the stored plans
        x, graph, y = setup(cpu, v)
        sched.alloc_graph(graph)
        x.set(v["x"].astype(np.float32))
        sched.compute(graph)
        sched.compute(graph)
        outs.append(y.numpy())
    assert np.array_equal(outs[0], outs[1])
    assert [a.n_plans for a in sched.allocators.values()] == [1, 1]
    dump = sched.dump()
    assert dump.startswith("scheduler: 3 split(s) over dev, cpu; 3 copies per compute")
    assert "split 0: dev" in dump and "split 1: cpu" in dump and "split 2: dev" in dump
    assert "soft_max         cpu" in dump and "memory dev: planned" in dump
    assert "copy  kq f32[30, 30, 1, 1] dev -> cpu" in dump


def test_node_by_node_restricted_vs_cpu():
    """Every node (all kept as outputs) equal between a split run and the CPU alone."""
    dev, cpu = Restricted(("soft_max", "norm")), CPUBackend(n_threads=2)
    v = make_values(5)
    x1, g1, _ = setup(cpu, v, all_outputs=True)
    ggpy.GraphAllocator(cpu).alloc_graph(g1)
    x1.set(v["x"].astype(np.float32))
    cpu.compute(g1)
    x2, g2, _ = setup(cpu, v, all_outputs=True)
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(g2)
    x2.set(v["x"].astype(np.float32))
    sched.compute(g2)
    assert len(sched.splits) == 5
    for a, b in zip(g1.nodes, g2.nodes):
        assert np.allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6), a.name


def test_no_backend_runs_the_op():
    dev = Restricted(("soft_max",))
    ctx = ggpy.Context()
    y = ggpy.soft_max(ctx.new_tensor(ggpy.F32, (4, 3)).set_input())
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    with pytest.raises(ggpy.UnsupportedOpError):
        ggpy.Scheduler([dev]).alloc_graph(graph)
    sched = ggpy.Scheduler([dev, CPUBackend(n_threads=1)])
    sched.set_backend(y, dev)
    with pytest.raises(ggpy.UnsupportedOpError, match="pinned"):
        sched.alloc_graph(graph)


# -- CUDA + CPU ----------------------------------------------------------------------------------------------
def test_cuda_fallback_and_weights_uploaded_once(cuda_backend):
    from ggpy.backends.cuda import CUDABackend

    class NoSoftMax(CUDABackend):
        def supports_op(self, node):
            return node.op != "soft_max" and super().supports_op(node)

    dev, cpu = NoSoftMax("cuda:0"), CPUBackend(n_threads=4)
    v = make_values(6)
    x, graph, y = setup(cpu, v)
    sched = ggpy.Scheduler([dev, cpu])
    sched.alloc_graph(graph)
    x.set(v["x"].astype(np.float32))
    sched.compute(graph)
    first = y.numpy()
    sched.compute(graph)
    print(sched.dump())
    assert [sp.backend.name for sp in sched.splits] == ["cuda:0", "cpu", "cuda:0"]
    assert [s.name for s, _ in sched.splits[1].inputs] == ["kq"]
    assert [s.name for s, _ in sched.splits[2].inputs] == ["sm"]
    assert sched.n_uploads == 5 and sched.n_copies == 6
    assert type(y.buffer).__name__ == "CUDABuffer"
    assert np.allclose(y.numpy(), first, rtol=1e-6, atol=1e-7)
    assert rel_err(first, reference(v)) < 1e-4


def test_cuda_node_by_node_vs_cpu(cuda_backend):
    cpu = CPUBackend(n_threads=4)
    v = make_values(7)
    x1, g1, _ = setup(cpu, v, all_outputs=True)
    ggpy.GraphAllocator(cpu).alloc_graph(g1)
    x1.set(v["x"].astype(np.float32))
    cpu.compute(g1)
    x2, g2, _ = setup(cuda_backend, v, all_outputs=True)       # weights on the GPU: every node follows them
    sched = ggpy.Scheduler([cuda_backend, cpu])
    sched.alloc_graph(g2)
    x2.set(v["x"].astype(np.float32))
    sched.compute(g2)
    print(sched.dump())
    assert [sp.backend.name for sp in sched.splits] == [cuda_backend.name]
    for a, b in zip(g1.nodes, g2.nodes):
        ra, rb = a.numpy(), b.numpy()
        assert np.abs(ra - rb).max() <= 1e-4 * max(1.0, np.abs(ra).max()), (a.name, a.op)


def test_cuda_extra_ops_on_gpu(cuda_backend):
    """diag_mask_inf, group_norm, get_rel_pos and add_rel_pos run on CUDA now."""
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (5, 4, 3, 2))
    assert cuda_backend.supports_op(ggpy.diag_mask_inf(a, 1)) and cuda_backend.supports_op(ggpy.group_norm(a, 2))
    p = ctx.new_tensor(ggpy.F32, (3, 5, 2, 2))
    assert cuda_backend.supports_op(ggpy.add_rel_pos(ctx.new_tensor(ggpy.F32, (9, 10, 2)), p, p))
    assert cuda_backend.supports_op(ggpy.get_rel_pos(ctx.new_tensor(ggpy.F32, (6, 13)), 7, 7))
