"""The add + rms_norm (+ mul by the weight, where the entry's Fused has `scale`) fusion (ggpy/graph/fusion.py's
add_rms_norm pattern, run by kernels/norm.py's entry on both backends): fused and unfused runs against a float64
reference on random inputs, the sum read again later (a residual stream) or not; the CUDA cases skip without a GPU."""
import numpy as np
import pytest

import ggpy

EPS = 1e-5
SHAPES = [(64, 7), (33, 2), (48, 5, 3), (4096, 3)]
FUSED_NAME = {"cpu": "add+rms_norm", "cuda": "add_rms_norm"}


def _run(backend, ne, later: bool, seed: int):
    """r + 0.5 x -> rms_norm * w [-> + the sum again]: (result, float64 reference, step names, graph, the pair)."""
    ctx = ggpy.Context()
    inputs = [ctx.new_tensor(ggpy.F32, n).set_input() for n in (ne, ne, ne[:1])]
    x, r, w = inputs
    total = ggpy.add(r, ggpy.scale(x, 0.5))           # the sum may take the scale's block (in place)
    norm = ggpy.rms_norm(total, EPS)
    y = ggpy.mul(norm, w)
    out = ggpy.add(total, ggpy.tanh(y)) if later else y
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(seed)
    vals = [(3 * rng.standard_normal(t.shape)).astype(np.float32) for t in inputs]
    for t, v in zip(inputs, vals):
        t.set(v)
    backend.compute(graph)
    xv, rv, wv = (v.astype(np.float64) for v in vals)
    sv = rv + 0.5 * xv
    yv = sv / np.sqrt((sv * sv).mean(-1, keepdims=True) + EPS) * wv
    ref = sv + np.tanh(yv) if later else yv
    return out.numpy(), ref, [st.name for st in backend.program(graph)], graph, (total, norm, y)


def _check(make, kind: str, ne, later: bool):
    fused_out, ref, names, graph, (total, norm, y) = _run(make(fuse=True), ne, later, seed=len(ne) + later)
    plain_out, _, plain_names, _, _ = _run(make(fuse=False), ne, later, seed=len(ne) + later)
    np.testing.assert_allclose(fused_out, ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(plain_out, ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(fused_out, plain_out, rtol=1e-6, atol=1e-6)
    assert any(n.startswith(FUSED_NAME[kind]) for n in names), names
    assert not any(n.startswith(FUSED_NAME[kind]) for n in plain_names), plain_names
    backend = make(fuse=True)
    run = [total, norm] + ([y] if backend.fused(norm, "add_rms_norm").scale else [])
    assert run in backend.fused_runs(graph)
    assert not any(norm in r for r in backend.fused_groups(graph))      # the norm keeps a block of its own
    k = backend.fused_runs(graph).index(run)
    dump = graph.dump(backend).splitlines()
    assert sum(f" g{k} " in line for line in dump) == len(run), "\n".join(dump)


@pytest.mark.parametrize("later", [True, False], ids=["residual", "alone"])
@pytest.mark.parametrize("ne", SHAPES, ids=str)
def test_cpu(ne, later):
    _check(lambda fuse: ggpy.CPUBackend(n_threads=2, fuse=fuse), "cpu", ne, later)


@pytest.mark.parametrize("later", [True, False], ids=["residual", "alone"])
@pytest.mark.parametrize("ne", SHAPES, ids=str)
def test_cuda(cuda_backend, ne, later):
    from ggpy.backends.cuda import CUDABackend
    _check(lambda fuse: CUDABackend("cuda", fuse=fuse), "cuda", ne, later)


def test_not_fused_across_another_node():
    """The rms_norm must be the next node after the add (views aside): the norm's memory is planned at its own turn."""
    ctx = ggpy.Context()
    a, b = (ctx.new_tensor(ggpy.F32, (16, 4)).set_input() for _ in range(2))
    total = ggpy.add(a, b)
    out = ggpy.add(ggpy.add(total, ggpy.sqr(b)), ggpy.rms_norm(total, EPS))    # sqr and an add come in between
    graph = ggpy.Graph().build_forward_expand(out)
    assert [n.op for n in graph.nodes] == ["add", "sqr", "add", "rms_norm", "add"]
    assert ggpy.CPUBackend(n_threads=1).fused_runs(graph) == []
