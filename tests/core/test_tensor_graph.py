"""Tensors (shapes, strides, set/numpy, types, errors) and graphs (build order, outputs, dump, dot)."""
from __future__ import annotations

import numpy as np
import pytest

import ggpy


def planned(*tensors, reuse=False):
    """A graph of `tensors` planned on the CPU backend (reuse=False: every tensor stays readable)."""
    graph = ggpy.Graph()
    for t in tensors:
        graph.build_forward_expand(t)
    backend = ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend, reuse=reuse).alloc_graph(graph)
    return graph, backend


# -- shapes and strides ------------------------------------------------------------------------------
def test_new_tensor_ne_nb_and_numpy_shape():
    ctx = ggpy.Context()
    t = ctx.new_tensor(ggpy.F32, (64, 32))
    assert t.ne == (64, 32, 1, 1)
    assert t.nb == (4, 256, 8192, 8192)
    assert t.is_contiguous() and not t.is_view() and t.op is None
    assert t.shape == (32, 64)
    assert t.n_dims == 2 and t.nelements == 2048 and t.nrows == 32 and t.nbytes == 8192
    assert t in ctx.tensors


@pytest.mark.parametrize("type_, ne, nb, shape", [
    (ggpy.F32, (5,), (4, 20, 20, 20), (5,)),
    (ggpy.F16, (3, 4, 5), (2, 6, 24, 120), (5, 4, 3)),
    (ggpy.I32, (2, 3, 4, 5), (4, 8, 24, 96), (5, 4, 3, 2)),
    (ggpy.F32, (5, 1, 3), (4, 20, 20, 60), (3, 1, 5)),       # inner size-1 dims stay, trailing ones go
    (ggpy.F32, (1, 1, 1, 1), (4, 4, 4, 4), (1,)),
    (ggpy.F16, (7, 1, 1, 2), (2, 14, 14, 14), (2, 1, 1, 7)),
])
def test_ne_nb_shape_table(type_, ne, nb, shape):
    t = ggpy.Context().new_tensor(type_, ne)
    assert t.ne == tuple(ne) + (1,) * (4 - len(ne))
    assert t.nb == nb
    assert t.shape == shape
    assert t.nbytes == int(np.prod(ne)) * type_.size


def test_new_tensor_nd_helpers_and_type_names():
    ctx = ggpy.Context()
    assert ctx.new_tensor_1d(ggpy.F32, 7).ne == (7, 1, 1, 1)
    assert ctx.new_tensor_2d(ggpy.F16, 7, 3).ne == (7, 3, 1, 1)
    assert ctx.new_tensor_3d(ggpy.I32, 7, 3, 2).ne == (7, 3, 2, 1)
    assert ctx.new_tensor_4d(ggpy.F32, 7, 3, 2, 5).ne == (7, 3, 2, 5)
    assert ctx.new_tensor("f16", (2,)).type is ggpy.F16
    assert ctx.new_tensor(np.int32, (2,)).type is ggpy.I32


@pytest.mark.parametrize("ne", [(), (1, 2, 3, 4, 5), (-1, 2), (2, "x"), "abc", None])
def test_new_tensor_bad_shape(ne):
    with pytest.raises(ggpy.ShapeError) as ei:
        ggpy.Context().new_tensor(ggpy.F32, ne)
    assert "ne" in str(ei.value)


def test_new_tensor_bad_type():
    with pytest.raises(ggpy.TypeMismatchError, match="complex|c16|unknown"):
        ggpy.Context().new_tensor(np.complex128, (2, 2))
    with pytest.raises(ggpy.TypeMismatchError, match="iq3_xxs"):
        ggpy.Context().new_tensor("iq3_xxs", (32, 2))
    with pytest.raises(ggpy.ShapeError, match="q4_0 tensor needs ne\\[0\\] to be a multiple of its block of 32"):
        ggpy.Context().new_tensor("q4_0", (2, 2))


def test_view_geometry():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (6, 4, 3))
    t = ggpy.transpose(a)
    assert t.ne == (4, 6, 3, 1) and t.nb == (24, 4, 96, 288)
    assert t.is_view() and t.view_src is a and t.is_transposed() and not t.is_contiguous()
    p = ggpy.permute(a, 2, 0, 1)
    assert p.ne == (4, 3, 6, 1) and p.nb == (24, 96, 4, 288)
    v = ggpy.view_2d(a, 3, 2, a.nb[1], a.nb[1])
    assert v.ne == (3, 2, 1, 1) and v.view_offs == 24 and v.view_src is a
    assert not v.is_contiguous()                        # 3 of every 6 columns
    vv = ggpy.view_1d(v, 2, 8)
    assert vv.view_src is a and vv.view_offs == 32      # views of views point at the owning tensor


# -- set / numpy ---------------------------------------------------------------------------------------
def test_set_numpy_round_trip_f32_with_both_shapes():
    rng = np.random.default_rng(0)
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32))
    b = ctx.new_tensor(ggpy.F32, (5, 1, 3))
    out = ggpy.add(ggpy.transpose(a), ggpy.transpose(a))
    out2 = ggpy.neg(b)
    planned(out, out2)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    a.set(x)
    got = a.numpy()
    assert got.shape == (32, 64) and got.dtype == np.float32
    np.testing.assert_array_equal(got, x)
    y = rng.standard_normal((32, 64)).astype(np.float32)
    a.set(y.reshape(1, 1, 32, 64))                      # the full 4-d shape works too
    np.testing.assert_array_equal(a.numpy(), y)
    z = rng.standard_normal((3, 1, 5))
    b.set(z)                                            # float64 in, float32 stored
    assert b.numpy().shape == (3, 1, 5)
    np.testing.assert_array_equal(b.numpy(), z.astype(np.float32))
    # numpy() is a copy: writing it changes nothing
    got = b.numpy()
    got[...] = 0
    assert np.all(b.numpy() != 0)


def test_numpy_of_views_reads_through_strides():
    rng = np.random.default_rng(1)
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (6, 4, 3))
    t = ggpy.transpose(a)
    p = ggpy.permute(a, 2, 0, 1)
    v = ggpy.view_2d(a, 3, 2, a.nb[1], a.nb[1] + 4)
    graph, _ = planned(ggpy.neg(t), ggpy.neg(p), ggpy.neg(v), t, p, v)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    a.set(x)
    np.testing.assert_array_equal(t.numpy(), x.transpose(0, 2, 1))
    # permute(2, 0, 1): dim0 -> 2, dim1 -> 0, dim2 -> 1: result ne = (4, 3, 6), numpy (6, 3, 4)
    np.testing.assert_array_equal(p.numpy(), x.transpose(2, 0, 1))
    np.testing.assert_array_equal(v.numpy(), x[0, 1:3, 1:4])


def test_f16_round_trip():
    rng = np.random.default_rng(2)
    ctx = ggpy.Context()
    h = ctx.new_tensor(ggpy.F16, (7, 5))
    planned(ggpy.neg(h))
    x = (rng.standard_normal((5, 7)) * 100).astype(np.float16)
    h.set(x)
    got = h.numpy()
    assert got.dtype == np.float16 and got.shape == (5, 7)
    np.testing.assert_array_equal(got, x)
    y = rng.standard_normal((5, 7))                     # float64 in: rounded to the nearest half
    h.set(y)
    np.testing.assert_array_equal(h.numpy(), y.astype(np.float16))
    assert np.abs(h.numpy().astype(np.float64) - y).max() <= np.abs(y).max() * 2 ** -10


def test_i32_round_trip_and_bool():
    rng = np.random.default_rng(3)
    ctx = ggpy.Context()
    i = ctx.new_tensor(ggpy.I32, (6, 2))
    planned(ggpy.view_tensor(i))
    x = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(2, 6), dtype=np.int64)
    i.set(x.astype(np.int32))
    got = i.numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, x.astype(np.int32))
    i.set(np.array([[True, False] * 3] * 2))
    np.testing.assert_array_equal(i.numpy(), [[1, 0] * 3] * 2)


def test_set_wrong_shape_or_dtype_names_given_and_expected():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32)).set_name("weights")
    i = ctx.new_tensor(ggpy.I32, (4,)).set_name("idx")
    planned(ggpy.neg(a), ggpy.view_tensor(i))
    with pytest.raises(ggpy.ShapeError) as ei:
        a.set(np.zeros((64, 32), np.float32))          # ne order instead of numpy order
    msg = str(ei.value)
    assert "weights" in msg and "(32, 64)" in msg and "(64, 32)" in msg
    with pytest.raises(ggpy.ShapeError):
        a.set(np.zeros(2048, np.float32))
    with pytest.raises(ggpy.TypeMismatchError) as ei:
        i.set(np.array([0.5, 1.0, 2.0, 3.0]))
    msg = str(ei.value)
    assert "idx" in msg and "i32" in msg and "float64" in msg
    with pytest.raises(ggpy.TypeMismatchError) as ei:
        a.set(np.full((32, 64), "x"))
    assert "f32" in str(ei.value)
    with pytest.raises(ggpy.TypeMismatchError):
        a.set(np.zeros((32, 64), np.complex64))
    assert issubclass(ggpy.ShapeError, ggpy.GGPYError) and issubclass(ggpy.TypeMismatchError, ggpy.GGPYError)


def test_read_before_planning_raises():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (3, 2)).set_name("lonely")
    with pytest.raises(ggpy.AllocationError) as ei:
        a.numpy()
    assert "lonely" in str(ei.value) and "no memory" in str(ei.value)
    with pytest.raises(ggpy.AllocationError):
        a.set(np.ones((2, 3)))


# -- graphs ----------------------------------------------------------------------------------------
def _diamond():
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (8, 4)).set_name("x")
    w = ctx.new_tensor(ggpy.F32, (8, 8)).set_name("w")
    b = ctx.new_tensor(ggpy.F32, (8,)).set_name("b")
    h = ggpy.mul_mat(w, x).set_name("h")
    g = ggpy.gelu(h).set_name("g")
    s = ggpy.sigmoid(h).set_name("s")
    m = ggpy.mul(g, s).set_name("m")
    out = ggpy.add(m, b).set_name("out")
    return x, w, b, h, g, s, m, out


def test_build_forward_expand_order_and_leafs():
    x, w, b, h, g, s, m, out = _diamond()
    graph = ggpy.Graph()
    v0 = graph.version
    assert graph.build_forward_expand(out) is graph
    assert graph.version > v0
    assert [t.name for t in graph.nodes] == ["h", "g", "s", "m", "out"]
    assert sorted(t.name for t in graph.leafs) == ["b", "w", "x"]
    assert len(graph) == 5
    # sources always come before their users; every source is a leaf or an earlier node
    seen = {id(t) for t in graph.leafs}
    for node in graph.nodes:
        for src in node.src:
            assert id(src) in seen, f"{src.name} used by {node.name} before it is computed"
        seen.add(id(node))
    assert out.is_output and not any(t.is_output for t in (h, g, s, m))
    # expanding again with a tensor already in the graph adds nothing but marks it as an output
    n = len(graph.nodes)
    graph.build_forward_expand(g)
    assert len(graph.nodes) == n and g.is_output
    # a second output that depends on the graph adds only the new nodes
    extra = ggpy.scale(g, 2.0).set_name("extra")
    graph.build_forward_expand(extra)
    assert [t.name for t in graph.nodes] == ["h", "g", "s", "m", "out", "extra"]


def test_every_expanded_tensor_is_a_readable_output():
    rng = np.random.default_rng(4)
    x, w, b, h, g, s, m, out = _diamond()
    graph = ggpy.Graph().build_forward_expand(g).build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    xv, wv, bv = (rng.uniform(0.25, 1, sh) * rng.choice([-1, 1], sh) for sh in ((4, 8), (8, 8), (8,)))
    x.set(xv)
    w.set(wv)
    b.set(bv)
    backend.compute(graph)
    hv = xv @ wv.T
    gv = 0.5 * hv * (1 + np.tanh(np.sqrt(2 / np.pi) * (hv + 0.044715 * hv ** 3)))
    sv = 1 / (1 + np.exp(-hv))
    np.testing.assert_allclose(g.numpy(), gv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), gv * sv + bv, rtol=1e-4, atol=1e-5)
    with pytest.raises(ggpy.AllocationError, match="released"):
        h.numpy()
    with pytest.raises(ggpy.AllocationError, match="released"):
        m.numpy()


def test_build_forward_expand_rejects_non_tensors():
    with pytest.raises(TypeError, match="Tensor"):
        ggpy.Graph().build_forward_expand(np.zeros(3))


def test_graph_with_shared_subexpressions_keeps_each_node_once():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (4, 4))
    t = a
    for _ in range(30):                        # a ladder: each step reads the previous one twice
        t = ggpy.add(ggpy.tanh(t), t)
    graph = ggpy.Graph().build_forward_expand(t)
    assert len(graph.nodes) == 60 and len(graph.leafs) == 1
    assert len({id(n) for n in graph.nodes}) == 60


def test_dump_and_dot_contain_op_shape_type_bytes():
    x, w, b, h, g, s, m, out = _diamond()
    half = ggpy.Context().new_tensor(ggpy.F16, (8, 3)).set_name("half")
    mm16 = ggpy.mul_mat(half, half).set_name("mm16")
    graph = ggpy.Graph().build_forward_expand(out).build_forward_expand(mm16)
    text = graph.dump()
    print(text)
    lines = text.splitlines()
    assert len(lines) == 2 + len(graph.nodes) + len(graph.leafs)
    assert "6 nodes" in lines[0] and "4 leafs" in lines[0]
    h_line = next(ln for ln in lines if " h " in ln and "mul_mat" in ln)
    assert "f32" in h_line and str(h.ne) in h_line and str(h.nbytes) in h_line and "w, x" in h_line
    half_line = next(ln for ln in lines if "half" in ln and "leaf" in ln)
    assert "f16" in half_line and str((8, 3, 1, 1)) in half_line and " 48 " in half_line
    out_line = next(ln for ln in lines[2:] if ln.split()[2] == "add")
    assert "[O]" in out_line and "m, b" in out_line
    for op in ("mul_mat", "gelu", "sigmoid", "mul", "add"):
        assert any(ln.split()[2] == op for ln in lines[2:])

    dot = graph.to_dot()
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    for t in graph.leafs + graph.nodes:
        label_parts = [t.op or "leaf", f"{t.type.name} {list(t.ne)}", f"{t.nbytes} B"]
        assert any(all(p in ln for p in label_parts) and (t.name in ln) for ln in dot.splitlines()), t.name
    n_edges = sum(1 for n in graph.nodes for s_ in n.src if s_ is not None)
    assert dot.count("->") == n_edges
