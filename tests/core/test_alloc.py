"""The graph allocator: offsets by liveness, in-place reuse, views, outputs, alignment, several buffers,
per-node temps from the same heap, reserve/replay/re-plan, the report, and the overlap check.

Every computed result is compared with a float64 numpy reference, and every placement is checked by
conftest.verify_placement, which re-derives liveness from the graph independently of the planner.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggpy
from ggpy.alloc.dynamic import DynamicAllocator, align_up
from ggpy.alloc.plan import Block, Plan
from ggpy.backends.cpu import HostBufferType
from temp_backend import TempBackend

RTOL = 2e-5


# -- helpers ----------------------------------------------------------------------------------------
def rand(rng, shape, dtype=np.float32):
    """Random non-zero values: magnitude in [0.25, 1), random sign."""
    return (rng.uniform(0.25, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(dtype)


def gelu64(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def mm64(a, b):
    """ggml mul_mat for 2-d numpy arrays: a is (M, K), b is (N, K) -> (N, M)."""
    return np.asarray(b, np.float64) @ np.asarray(a, np.float64).T


def set_chain_inputs(rng, x, ws, x_shape, w_shape):
    """Fresh random values for a chain's input x and weights ws; returns them as (xv, [wv, ...])."""
    xv = rand(rng, x_shape)
    wv = [rand(rng, w_shape) for _ in ws]
    x.set(xv)
    for w, v in zip(ws, wv):
        w.set(v)
    return xv, wv


def close(got, ref, rtol=RTOL):
    ref = np.asarray(ref, dtype=np.float64)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=rtol * max(1.0, np.abs(ref).max()))


def backend_of(**buffer_kw):
    return ggpy.CPUBackend(n_threads=2, buffer_type=HostBufferType(**buffer_kw) if buffer_kw else None)


def position(graph, t):
    for p, x in enumerate(graph.leafs + graph.nodes):
        if x is t:
            return p
    raise KeyError(t)


def disjoint(t, u):
    return t.buffer is not u.buffer or t.offset + t.nbytes <= u.offset or u.offset + u.nbytes <= t.offset


# -- the README flow ---------------------------------------------------------------------------------
def test_readme_flow_matches_float64_reference(placement_checker):
    rng = np.random.default_rng(1)
    x = rand(rng, (32, 64), np.float64)     # set() converts, as in the README (np.random.randn)
    y = rand(rng, (16, 64), np.float64)

    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32))
    b = ctx.new_tensor(ggpy.F32, (64, 16))
    c = ggpy.gelu(ggpy.mul_mat(a, b))
    assert c.ne == (32, 16, 1, 1)
    graph = ggpy.Graph()
    graph.build_forward_expand(c)
    backend = ggpy.CPUBackend(n_threads=2)
    alloc = ggpy.GraphAllocator(backend)
    alloc.alloc_graph(graph)
    a.set(x)
    b.set(y)
    backend.compute(graph)
    out = c.numpy()

    assert out.shape == (16, 32) and out.dtype == np.float32
    close(out, gelu64(mm64(x, y)), rtol=1e-4)
    placement_checker(graph, alloc)
    # a second compute with new inputs reuses the same placement and stays correct
    x2 = rand(rng, (32, 64))
    a.set(x2)
    backend.compute(graph)
    close(c.numpy(), gelu64(mm64(x2, y)), rtol=1e-4)


# -- offsets by liveness ----------------------------------------------------------------------------
def _mm_chain(ctx, n_layers, k=8, n=4):
    x = ctx.new_tensor(ggpy.F32, (k, n)).set_name("x")
    ws = [ctx.new_tensor(ggpy.F32, (k, k)).set_name(f"w{i}") for i in range(n_layers)]
    hs = []
    h = x
    for i, w in enumerate(ws):
        h = ggpy.mul_mat(w, h).set_name(f"h{i}")
        hs.append(h)
    return x, ws, hs


def test_intermediates_reuse_memory_after_their_last_use(placement_checker):
    rng = np.random.default_rng(2)
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 6)
    graph = ggpy.Graph().build_forward_expand(hs[-1])
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)

    # h_i is dead once h_{i+1} is computed: h_{i+2} takes its block (mul_mat never works in place)
    for i in range(len(hs) - 2):
        assert hs[i + 2].offset == hs[i].offset, [h.offset for h in hs]
        assert hs[i + 1].offset != hs[i].offset
    assert plan.peak_bytes < plan.no_reuse_bytes
    # leafs + two live intermediates at most
    leaf_bytes = sum(align_up(t.nbytes, 64) for t in graph.leafs)
    assert plan.peak_bytes == leaf_bytes + 2 * align_up(hs[0].nbytes, 64)

    xv, wv = set_chain_inputs(rng, x, ws, (4, 8), (8, 8))
    backend.compute(graph)
    ref = xv.astype(np.float64)
    for v in wv:
        ref = mm64(v, ref)
    close(hs[-1].numpy(), ref)
    for h in hs[:-1]:
        with pytest.raises(ggpy.AllocationError, match="released"):
            h.numpy()


def test_leafs_are_placed_first_and_never_freed(placement_checker):
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 4)
    graph = ggpy.Graph().build_forward_expand(hs[-1])
    alloc = ggpy.GraphAllocator(backend_of())
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    # leafs sit at the bottom of the heap, packed in graph order, below every node
    expected = 0
    for leaf in graph.leafs:
        assert leaf.offset == expected
        expected += align_up(leaf.nbytes, 64)
    assert all(n.offset >= expected for n in graph.nodes)
    assert not any(position(graph, leaf) in plan.released for leaf in graph.leafs)


def _inplace_setup(extra=None):
    rng = np.random.default_rng(3)
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (8, 6)).set_name("w")
    x = ctx.new_tensor(ggpy.F32, (8, 5)).set_name("x")
    mm = ggpy.mul_mat(w, x).set_name("mm")        # ne (6, 5)
    r = ggpy.relu(mm).set_name("r")
    out = ggpy.scale(r, 2.0).set_name("out")
    wv, xv = rand(rng, (6, 8)), rand(rng, (5, 8))
    return ctx, w, x, mm, r, out, wv, xv


def test_inplace_takes_over_single_consumer_source(placement_checker):
    ctx, w, x, mm, r, out, wv, xv = _inplace_setup()
    graph = ggpy.Graph().build_forward_expand(out)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert r.offset == mm.offset and r.buffer is mm.buffer
    assert plan.timeline[1].inplace and plan.timeline[1].out_bytes == 0
    assert not plan.timeline[0].inplace
    w.set(wv)
    x.set(xv)
    backend.compute(graph)
    close(out.numpy(), 2.0 * np.maximum(mm64(wv, xv), 0.0))
    for t in (mm, r):
        with pytest.raises(ggpy.AllocationError):
            t.numpy()


def test_no_inplace_when_source_is_an_output(placement_checker):
    ctx, w, x, mm, r, out, wv, xv = _inplace_setup()
    graph = ggpy.Graph().build_forward_expand(mm).build_forward_expand(out)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert disjoint(r, mm)
    assert not plan.timeline[1].inplace
    w.set(wv)
    x.set(xv)
    backend.compute(graph)
    close(mm.numpy(), mm64(wv, xv))
    close(out.numpy(), 2.0 * np.maximum(mm64(wv, xv), 0.0))


def test_no_inplace_when_source_has_two_consumers(placement_checker):
    rng = np.random.default_rng(4)
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (8, 6))
    x = ctx.new_tensor(ggpy.F32, (8, 5))
    mm = ggpy.mul_mat(w, x)
    r = ggpy.tanh(mm)                # mm is also read by s: no in place
    s = ggpy.add(r, mm)              # r has one consumer: s takes it over
    out = ggpy.neg(s)                # s has one consumer, out is an output: ggml would allow it too
    graph = ggpy.Graph().build_forward_expand(out)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert disjoint(r, mm)
    assert s.offset == r.offset
    wv, xv = rand(rng, (6, 8)), rand(rng, (5, 8))
    w.set(wv)
    x.set(xv)
    backend.compute(graph)
    m = mm64(wv, xv)
    close(out.numpy(), -(np.tanh(m) + m), rtol=1e-5)


def test_no_inplace_for_leafs_broadcast_sources_mul_mat_and_views(placement_checker):
    rng = np.random.default_rng(5)
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (8, 8))
    x = ctx.new_tensor(ggpy.F32, (8, 4))
    bias = ctx.new_tensor(ggpy.F32, (8, 1))
    r0 = ggpy.relu(x)                       # leaf source: never taken over
    mm = ggpy.mul_mat(w, r0)                # same layout as r0 (8, 4) but mul_mat never runs in place
    b1 = ggpy.sigmoid(bias)                 # (8, 1): single consumer, but broadcast -> other layout
    s = ggpy.add(mm, b1)                    # takes mm (same layout) but not b1
    v = ggpy.transpose(s)                   # a view of s: s has a view, so nothing takes it over
    t = ggpy.scale(v, 3.0)                  # reads through the view: its source is not owned
    b2 = ggpy.neg(bias)                     # (8, 1), single consumer, the only intermediate source of
    s2 = ggpy.add(x, b2)                    # s2 (8, 4): too small to be taken over
    t2 = ggpy.mul_mat(w, s2)
    graph = ggpy.Graph().build_forward_expand(t).build_forward_expand(t2)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert disjoint(r0, x)
    assert disjoint(mm, r0)
    assert s.offset == mm.offset and disjoint(s, b1)
    assert disjoint(t, s)
    assert disjoint(s2, b2) and disjoint(s2, x)
    assert position(graph, v) not in plan.slots
    wv, xv, bv = rand(rng, (8, 8)), rand(rng, (4, 8)), rand(rng, (8,))
    w.set(wv)
    x.set(xv)
    bias.set(bv)
    backend.compute(graph)
    ref = mm64(wv, np.maximum(xv, 0)) + 1.0 / (1.0 + np.exp(-bv.astype(np.float64)))
    close(t.numpy(), 3.0 * ref.T, rtol=1e-5)
    close(t2.numpy(), mm64(wv, xv - bv))


def test_views_own_no_memory_and_keep_their_source_alive(placement_checker):
    rng = np.random.default_rng(6)
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (8, 8))
    x = ctx.new_tensor(ggpy.F32, (8, 6))
    mm = ggpy.mul_mat(w, x)                                   # (8, 6)
    p = ggpy.permute(ggpy.reshape_3d(mm, 4, 2, 6), 2, 0, 1)   # view of a view: (2, 6, 4)
    # unrelated work in between: these must not land on mm's bytes while p is still to be read
    h = x
    for _ in range(4):
        h = ggpy.gelu(ggpy.mul_mat(w, h))
    late = ggpy.scale(p, -1.0)                                # (2, 6, 4) the last reader of mm
    graph = ggpy.Graph().build_forward_expand(h).build_forward_expand(late)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    for node in graph.nodes:
        if node.view_src is not None:
            assert position(graph, node) not in plan.slots
            assert node.buffer is node.view_src.buffer
            assert node.offset == node.view_src.offset + node.view_offs
    assert p.view_src is mm
    mm_step = graph.nodes.index(mm)
    late_step = graph.nodes.index(late)
    for node in graph.nodes[mm_step + 1:late_step]:
        if node.view_src is None:
            assert disjoint(node, mm), f"{node!r} overwrites mm while a view of it is still to be read"

    wv, xv = rand(rng, (8, 8)), rand(rng, (6, 8))
    w.set(wv)
    x.set(xv)
    backend.compute(graph)
    m = mm64(wv, xv)                                          # numpy (6, 8) = reversed ne
    ref_p = m.reshape(6, 2, 4).transpose(2, 0, 1)             # ne (4,2,6) -> permute(2,0,1) -> ne (2,6,4)
    close(late.numpy(), -ref_p)
    hv = xv.astype(np.float64)
    for _ in range(4):
        hv = gelu64(mm64(wv, hv))
    close(h.numpy(), hv, rtol=1e-4)


def test_output_view_keeps_base_readable(placement_checker):
    rng = np.random.default_rng(7)
    ctx = ggpy.Context()
    w = ctx.new_tensor(ggpy.F32, (8, 8))
    x = ctx.new_tensor(ggpy.F32, (8, 3))
    mm = ggpy.mul_mat(w, x)
    v = ggpy.view_2d(mm, 4, 3, mm.nb[1], 4 * 4)      # columns 4..7 of every row: an output, also read
    u = ggpy.sigmoid(v)
    nxt = ggpy.mul_mat(w, ggpy.relu(mm))             # the last reader of mm itself
    more = ggpy.tanh(ggpy.mul_mat(w, nxt))           # would reuse mm's bytes if mm were released
    graph = ggpy.Graph().build_forward_expand(v).build_forward_expand(u).build_forward_expand(more)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    wv, xv = rand(rng, (8, 8)), rand(rng, (3, 8))
    w.set(wv)
    x.set(xv)
    backend.compute(graph)
    m = mm64(wv, xv)
    close(v.numpy(), m[:, 4:8])
    close(mm.numpy(), m)                              # base of an output view is never released
    close(u.numpy(), 1.0 / (1.0 + np.exp(-m[:, 4:8])), rtol=1e-5)
    close(more.numpy(), np.tanh(mm64(wv, mm64(wv, np.maximum(m, 0)))), rtol=1e-5)


def test_outputs_are_never_freed(placement_checker):
    rng = np.random.default_rng(8)
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 6)
    graph = ggpy.Graph()
    graph.build_forward_expand(hs[1])                 # an intermediate output, read by later nodes
    graph.build_forward_expand(hs[-1])
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert hs[1].is_output and hs[-1].is_output
    for h in hs[2:]:
        assert disjoint(h, hs[1])
    assert hs[4].offset == hs[2].offset               # the others still reuse memory
    assert position(graph, hs[1]) not in plan.released
    xv, wv = set_chain_inputs(rng, x, ws, (4, 8), (8, 8))
    backend.compute(graph)
    refs = []
    ref = xv.astype(np.float64)
    for v in wv:
        ref = mm64(v, ref)
        refs.append(ref)
    close(hs[1].numpy(), refs[1])
    close(hs[-1].numpy(), refs[-1])


# -- reading outputs and intermediates ---------------------------------------------------------------
def test_reading_before_planning_and_released_intermediates_raise():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (4, 4)).set_name("a")
    m = ggpy.mul_mat(a, a).set_name("m")
    v = ggpy.transpose(m).set_name("v")
    e = ggpy.tanh(v).set_name("e")
    out = ggpy.mul_mat(e, a).set_name("out")
    with pytest.raises(ggpy.AllocationError, match="no memory") as ei:
        a.numpy()
    assert "'a'" in str(ei.value) and "alloc_graph" in str(ei.value)
    with pytest.raises(ggpy.AllocationError, match="no memory"):
        a.set(np.ones((4, 4), np.float32))
    graph = ggpy.Graph().build_forward_expand(out)
    with pytest.raises(ggpy.AllocationError):
        out.numpy()                                   # in a graph, but not planned yet
    backend = backend_of()
    with pytest.raises(ggpy.AllocationError):
        backend.compute(graph)                        # computing an unplanned graph is refused too
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    av = rand(np.random.default_rng(9), (4, 4))
    a.set(av)
    backend.compute(graph)
    close(out.numpy(), mm64(np.tanh(mm64(av, av).T), av), rtol=1e-5)
    for t in (m, v, e):
        with pytest.raises(ggpy.AllocationError, match="released") as ei:
            t.numpy()
        msg = str(ei.value)
        assert t.name in msg and "set_output" in msg


def test_set_output_before_planning_keeps_an_intermediate():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (4, 4))
    m = ggpy.mul_mat(a, a).set_output()
    out = ggpy.mul_mat(ggpy.tanh(m), a)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = backend_of()
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    av = rand(np.random.default_rng(10), (4, 4))
    a.set(av)
    backend.compute(graph)
    close(m.numpy(), mm64(av, av))


def test_no_reuse_gives_every_tensor_its_own_bytes(placement_checker):
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 5)
    r = ggpy.relu(hs[-1])
    out = ggpy.scale(r, 0.5)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, reuse=False, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    owned = [t for t in graph.leafs + graph.nodes if t.view_src is None]
    for i, t in enumerate(owned):
        for u in owned[i + 1:]:
            assert disjoint(t, u)
    temp_bytes = sum(align_up(size, 64) for _, _, size in plan.temps.values())
    assert plan.no_reuse_bytes - temp_bytes <= plan.peak_bytes <= plan.no_reuse_bytes   # temps aside: equal
    assert not plan.released
    rng = np.random.default_rng(11)
    xv, wv = set_chain_inputs(rng, x, ws, (4, 8), (8, 8))
    backend.compute(graph)
    ref = xv.astype(np.float64)
    for v, h in zip(wv, hs):
        ref = mm64(v, ref)
        close(h.numpy(), ref)                          # every intermediate stays readable
    close(out.numpy(), 0.5 * np.maximum(ref, 0))


# -- alignment and several buffers -------------------------------------------------------------------
@pytest.mark.parametrize("alignment", [32, 256, 4096])
def test_alignment_per_buffer_type(alignment, placement_checker):
    rng = np.random.default_rng(12)
    backend = TempBackend(lambda node: 3 * node.nbytes + 12, buffer_type=HostBufferType(alignment=alignment))
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (3, 5))              # 60 bytes: not a multiple of any alignment
    b = ctx.new_tensor(ggpy.F32, (3, 7))
    m = ggpy.mul_mat(a, b)                            # (5, 7)
    s = ggpy.sqr(ggpy.mul_mat(a, ggpy.tanh(b)))
    out = ggpy.add(ggpy.transpose(m), ggpy.transpose(s))
    graph = ggpy.Graph().build_forward_expand(out)
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    for t in graph.leafs + graph.nodes:
        if t.view_src is None:
            assert t.offset % alignment == 0
            assert (t.buffer.data.ctypes.data + t.offset) % alignment == 0
    for node in graph.nodes:
        buf, off, _ = node.temp
        assert off % alignment == 0 and (buf.data.ctypes.data + off) % alignment == 0
    assert all(s % alignment == 0 for s in plan.chunk_sizes)
    av, bv = rand(rng, (5, 3)), rand(rng, (7, 3))
    a.set(av)
    b.set(bv)
    backend.compute(graph)
    ref = mm64(av, bv).T + (mm64(av, np.tanh(bv.astype(np.float64))) ** 2).T
    close(out.numpy(), ref, rtol=1e-5)


def test_plan_split_over_several_buffers_when_max_size_is_small(placement_checker):
    rng = np.random.default_rng(13)
    max_size = 1024
    backend = backend_of(max_size=max_size)
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (16, 8))                       # 512 bytes
    ws = [ctx.new_tensor(ggpy.F32, (16, 16)) for _ in range(4)]  # 1024 bytes each: one buffer each
    h = x
    for w in ws:
        h = ggpy.relu(ggpy.mul_mat(w, h))
    out = ggpy.add(h, x)
    graph = ggpy.Graph().build_forward_expand(out)
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    placement_checker(graph, alloc)
    assert len(plan.chunk_sizes) >= 5
    assert all(0 < s <= max_size for s in plan.chunk_sizes)
    assert len(alloc.buffers) == len(plan.chunk_sizes)
    assert all(b.size <= max_size for b in alloc.buffers)
    assert sum(plan.chunk_sizes) == plan.peak_bytes
    assert len({id(t.buffer) for t in graph.leafs + graph.nodes}) >= 5
    xv, wv = set_chain_inputs(rng, x, ws, (8, 16), (16, 16))
    backend.compute(graph)
    ref = xv.astype(np.float64)
    for v in wv:
        ref = np.maximum(mm64(v, ref), 0)
    close(out.numpy(), ref + xv)


def test_tensor_larger_than_max_size_is_refused():
    backend = backend_of(max_size=1024)
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (16, 32))       # 2048 bytes
    graph = ggpy.Graph().build_forward_expand(ggpy.relu(a))
    with pytest.raises(ggpy.OutOfMemoryError, match="1024"):
        ggpy.GraphAllocator(backend).alloc_graph(graph)


# -- the free list ---------------------------------------------------------------------------------------
def test_dynamic_allocator_best_fit_and_merging():
    d = DynamicAllocator(64, 1 << 20)
    a = d.alloc(256)           # 256 at 0
    b = d.alloc(64)            # 64 at 256
    c = d.alloc(10)            # 64 at 320 (rounded up to the alignment)
    e = d.alloc(64)            # 64 at 384
    f = d.alloc(64)            # 64 at 448
    assert [a, b, c, e, f] == [(0, 0), (0, 256), (0, 320), (0, 384), (0, 448)]
    assert d.chunk_sizes == [512]
    d.free(0, 0, 256)          # a hole of 256 at 0
    d.free(0, 320, 10)         # a hole of 64 at 320
    # best fit: a 64-byte request takes the 64-byte hole, not the first (larger) one
    assert d.alloc(64) == (0, 320)
    assert d.alloc(200) == (0, 0)       # the 256-byte hole is the only one that fits
    # nothing fits: grow at the end of the heap
    assert d.alloc(1) == (0, 512)
    assert d.chunk_sizes == [576]
    # merging: three freed neighbours make one hole that serves one larger request
    d.free(0, 256, 64)
    d.free(0, 384, 64)
    d.free(0, 320, 64)
    assert d.chunks[0].free[0] == [256, 192]
    assert d.alloc(192) == (0, 256)
    # freeing everything merges back into the open end; the high-water mark stays
    for off, size in ((0, 256), (256, 192), (448, 64), (512, 1)):
        d.free(0, off, size)
    assert d.chunks[0].free == [[0, 1 << 20]]
    assert d.chunk_sizes == [576]


def test_dynamic_allocator_chunks_and_max_size():
    d = DynamicAllocator(64, 256)
    assert d.alloc(150) == (0, 0)      # 192 bytes: 64 left in chunk 0
    assert d.alloc(100) == (1, 0)      # 128 bytes do not fit what is left of chunk 0
    assert d.alloc(50) == (0, 192)     # the first chunk whose open end fits
    assert d.alloc(64) == (1, 128)
    assert d.chunk_sizes == [256, 192]
    with pytest.raises(ggpy.OutOfMemoryError, match="256"):
        d.alloc(300)


# -- temps from the same heap ----------------------------------------------------------------------------
def _temp_graph(ctx, n_nodes=8):
    x = ctx.new_tensor(ggpy.F32, (16, 8))
    w = ctx.new_tensor(ggpy.F32, (16, 16))
    hs = []
    h = x
    for i in range(n_nodes):
        h = ggpy.mul_mat(w, h) if i % 2 == 0 else ggpy.tanh(ggpy.add(h, x))
        hs.append(h)
    return x, w, h


def test_temps_do_not_overlap_live_tensors_and_peak_grows_by_the_largest(placement_checker):
    rng = np.random.default_rng(14)
    temp_size = {}

    def size_of(node):
        return temp_size.setdefault(id(node), 200 + 64 * (len(temp_size) % 5))

    ctx = ggpy.Context()
    x, w, out = _temp_graph(ctx)
    graph = ggpy.Graph().build_forward_expand(out)
    tb = TempBackend(size_of)
    alloc = ggpy.GraphAllocator(tb, check=True)
    plan = alloc.alloc_graph(graph)
    expected = {i: size_of(n) for i, n in enumerate(graph.nodes)}
    placement_checker(graph, alloc, temps_expected=expected)
    assert len(plan.temps) == len(graph.nodes) >= 10
    assert [r.temp_bytes for r in plan.timeline] == [expected[i] for i in range(len(graph.nodes))]
    temp_blocks = [b for b in plan.blocks if b.what.startswith("temp")]
    assert len(temp_blocks) == len(graph.nodes)
    for i, b in enumerate(temp_blocks):
        assert b.end - b.start <= 1 and 3 * i <= b.start < 3 * i + 3   # live only while its node runs

    # the same graph without temps: temps add at most the largest one to the peak, not their sum
    ctx2 = ggpy.Context()
    x2, w2, out2 = _temp_graph(ctx2)
    graph2 = ggpy.Graph().build_forward_expand(out2)
    plain = ggpy.GraphAllocator(backend_of()).alloc_graph(graph2)
    largest = max(align_up(s, 64) for s in expected.values())
    total = sum(align_up(s, 64) for s in expected.values())
    assert plain.peak_bytes < plan.peak_bytes <= plain.peak_bytes + largest
    assert plan.peak_bytes < plain.peak_bytes + total // 2
    assert plan.no_reuse_bytes == plain.no_reuse_bytes + total

    # correct results although every temp is overwritten with NaN right before its node runs
    xv, wv = rand(rng, (8, 16)), rand(rng, (16, 16))
    x.set(xv)
    w.set(wv)
    tb.compute(graph)
    ref = xv.astype(np.float64)
    for i in range(8):
        ref = mm64(wv, ref) if i % 2 == 0 else np.tanh(ref + xv)
    close(out.numpy(), ref, rtol=1e-5)


def test_real_temp_of_f16_mul_mat(placement_checker):
    """The CPU mul_mat widens F16 operands into a temp block it asks for: results stay exact."""
    rng = np.random.default_rng(15)
    backend = backend_of()
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F16, (32, 8))
    b = ctx.new_tensor(ggpy.F16, (32, 6))
    c = ctx.new_tensor(ggpy.F32, (8, 6))
    h = ggpy.mul(ggpy.mul_mat(a, b), c)
    for _ in range(3):
        h = ggpy.add(ggpy.mul_mat(a, b), ggpy.tanh(h))
    graph = ggpy.Graph().build_forward_expand(h)
    alloc = ggpy.GraphAllocator(backend, check=True)
    plan = alloc.alloc_graph(graph)
    need = 32 * 8 * 4 + 32 * 6 * 4
    expected = {i: need for i, n in enumerate(graph.nodes) if n.op == "mul_mat"}
    assert len(expected) == 4 and all(backend.temp_size(graph.nodes[i]) == need for i in expected)
    placement_checker(graph, alloc, temps_expected=expected)
    assert {i: s for i, (_, _, s) in plan.temps.items()} == expected
    av, bv, cv = rand(rng, (8, 32), np.float16), rand(rng, (6, 32), np.float16), rand(rng, (6, 8))
    a.set(av)
    b.set(bv)
    c.set(cv)
    backend.compute(graph)
    m = mm64(av, bv)
    ref = m * cv
    for _ in range(3):
        ref = m + np.tanh(ref)
    close(h.numpy(), ref, rtol=1e-5)


# -- reserve, replay, re-plan ------------------------------------------------------------------------------
def _model(ctx, n_tokens, d=16, hidden=32):
    x = ctx.new_tensor(ggpy.F32, (d, n_tokens)).set_name("x").set_input()
    w1 = ctx.new_tensor(ggpy.F32, (d, hidden)).set_name("w1")
    b1 = ctx.new_tensor(ggpy.F32, (hidden, 1)).set_name("b1")
    w2 = ctx.new_tensor(ggpy.F32, (hidden, d)).set_name("w2")
    h = ggpy.gelu(ggpy.add(ggpy.mul_mat(w1, x), b1))
    out = ggpy.add(ggpy.scale(ggpy.mul_mat(w2, h), 0.5), x).set_name("out")
    return (x, w1, b1, w2), out


def _model_ref(vals):
    x, w1, b1, w2 = (v.astype(np.float64) for v in vals)
    h = gelu64(mm64(w1, x) + b1)
    return 0.5 * mm64(w2, h) + x


def _fill(rng, leafs):
    vals = [rand(rng, t.shape) for t in leafs]
    for t, v in zip(leafs, vals):
        t.set(v)
    return vals


def _build_model(n_tokens):
    ctx = ggpy.Context()
    leafs, out = _model(ctx, n_tokens)
    return leafs, out, ggpy.Graph().build_forward_expand(out)


def test_reserve_then_replay_without_replanning(placement_checker):
    rng = np.random.default_rng(16)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    _, _, worst = _build_model(12)
    alloc.reserve(worst)
    assert alloc.n_plans == 1
    assert all(t.buffer is None for t in worst.leafs + worst.nodes)   # reserve places nothing
    buffers = list(alloc.buffers)
    assert buffers and sum(b.size for b in buffers) >= alloc.plan.peak_bytes

    offsets = None
    for _ in range(3):                              # freshly built graphs of the same structure
        leafs, out, graph = _build_model(12)
        plan = alloc.alloc_graph(graph)
        assert alloc.n_plans == 1 and plan is alloc.plan
        assert alloc.buffers == buffers and all(x is y for x, y in zip(alloc.buffers, buffers))
        placement_checker(graph, alloc)
        now = [(t.offset, alloc.buffers.index(t.buffer)) for t in graph.leafs + graph.nodes]
        assert offsets is None or now == offsets
        offsets = now
        vals = _fill(rng, leafs)
        backend.compute(graph)
        close(out.numpy(), _model_ref(vals), rtol=1e-4)


def test_replan_when_shapes_or_structure_change(placement_checker):
    rng = np.random.default_rng(17)
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, check=True)
    leafs, out, graph = _build_model(8)
    alloc.alloc_graph(graph)
    assert alloc.n_plans == 1
    big_buffers = list(alloc.buffers)

    # smaller shapes: a new plan, the existing buffers are large enough and kept
    leafs, out, graph = _build_model(3)
    alloc.alloc_graph(graph)
    assert alloc.n_plans == 2
    assert all(x is y for x, y in zip(alloc.buffers, big_buffers))
    placement_checker(graph, alloc)
    vals = _fill(rng, leafs)
    backend.compute(graph)
    close(out.numpy(), _model_ref(vals), rtol=1e-4)

    # same graph again: replayed
    alloc.alloc_graph(graph)
    assert alloc.n_plans == 2

    # larger shapes: re-planned, buffers grow
    leafs, out, graph = _build_model(40)
    plan = alloc.alloc_graph(graph)
    assert alloc.n_plans == 3
    assert sum(b.size for b in alloc.buffers) >= plan.peak_bytes > sum(b.size for b in big_buffers)
    placement_checker(graph, alloc)
    vals = _fill(rng, leafs)
    backend.compute(graph)
    close(out.numpy(), _model_ref(vals), rtol=1e-4)

    # same shapes, different structure (one op changed): re-planned
    ctx = ggpy.Context()
    (x, w1, b1, w2), _ = _model(ctx, 40)
    h = ggpy.relu(ggpy.add(ggpy.mul_mat(w1, x), b1))
    out2 = ggpy.add(ggpy.scale(ggpy.mul_mat(w2, h), 0.5), x)
    g2 = ggpy.Graph().build_forward_expand(out2)
    alloc.alloc_graph(g2)
    assert alloc.n_plans == 4
    vals = _fill(rng, (x, w1, b1, w2))
    backend.compute(g2)
    xv, w1v, b1v, w2v = (v.astype(np.float64) for v in vals)
    close(out2.numpy(), 0.5 * mm64(w2v, np.maximum(mm64(w1v, xv) + b1v, 0)) + xv, rtol=1e-5)

    # same structure, one more output: re-planned (outputs change liveness)
    leafs, out, graph = _build_model(40)
    graph.nodes[0].set_output()
    alloc.alloc_graph(graph)
    assert alloc.n_plans == 5


def test_same_graph_planned_again_by_another_allocator_recomputes_correctly():
    """A graph re-planned with other offsets must not run kernels bound to the old ones."""
    rng = np.random.default_rng(18)
    backend = backend_of()
    leafs, out, graph = _build_model(5)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    vals = _fill(rng, leafs)
    backend.compute(graph)
    first = out.numpy()
    close(first, _model_ref(vals), rtol=1e-4)
    other = ggpy.GraphAllocator(backend, reuse=False)
    other.alloc_graph(graph)
    vals = _fill(rng, leafs)                         # written into the new buffers
    backend.compute(graph)
    close(out.numpy(), _model_ref(vals), rtol=1e-4)
    assert out.buffer in other.buffers


# -- the report -------------------------------------------------------------------------------------------
def test_report_peak_no_reuse_and_timeline():
    backend = backend_of()
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 5)
    out = ggpy.scale(ggpy.relu(hs[-1]), 0.5).set_name("final")
    graph = ggpy.Graph().build_forward_expand(out)
    alloc = ggpy.GraphAllocator(backend)
    plan = alloc.alloc_graph(graph)

    owned = [t for t in graph.leafs + graph.nodes if t.view_src is None]
    assert plan.no_reuse_bytes == sum(align_up(max(t.nbytes, 1), 64) for t in owned)
    assert plan.peak_bytes == sum(plan.chunk_sizes) > 0
    assert plan.peak_bytes < plan.no_reuse_bytes
    assert sum(b.size for b in alloc.buffers) >= plan.peak_bytes

    assert len(plan.timeline) == len(graph.nodes)
    highs = [r.high_water for r in plan.timeline]
    assert highs == sorted(highs) and highs[-1] == plan.peak_bytes
    for node, row in zip(graph.nodes, plan.timeline):
        assert row.op == node.op and row.kernel == backend.kernel_name(node)
        assert 0 < row.live_bytes <= row.high_water
    relu_row = plan.timeline[graph.nodes.index(out.src[0])]
    assert relu_row.inplace

    text = plan.report()
    print(text)
    lines = text.splitlines()
    assert len(lines) == 2 + len(graph.nodes)
    assert "peak" in lines[0] and "without reuse" in lines[0]
    assert "blas_sgemm" in text and "relu" in text and "final" in text and "(in place)" in text
    assert [ln.split()[0] for ln in lines[2:]] == [str(i) for i in range(len(graph.nodes))]


# -- checking mode --------------------------------------------------------------------------------------
def _plan(blocks):
    return Plan(signature=(), slots={}, temps={}, released=set(), chunk_sizes=[1024], no_reuse_bytes=0,
                blocks=blocks)


def test_check_overlap_catches_overlapping_live_blocks():
    overlapping = [Block(0, 0, 128, -1, float("inf"), "leaf x"),
                   Block(0, 256, 128, 0, 5, "node a"),
                   Block(0, 320, 64, 3, 4, "temp of node b")]          # inside 'node a' while it lives
    with pytest.raises(ggpy.AllocationError) as ei:
        _plan(overlapping).check_overlap()
    msg = str(ei.value)
    assert "node a" in msg and "temp of node b" in msg and "320" in msg

    with pytest.raises(ggpy.AllocationError):
        _plan([Block(0, 64, 128, 0, 10, "a"), Block(0, 0, 128, 2, 3, "b")]).check_overlap()


def test_check_overlap_accepts_disjoint_blocks():
    _plan([Block(0, 0, 128, -1, float("inf"), "leaf"),
           Block(0, 128, 128, 0, 5, "a"),
           Block(0, 128, 128, 5, 9, "b, after a died"),       # same bytes, later in time
           Block(0, 256, 64, 1, 2, "temp"),                   # touching, not overlapping
           Block(1, 0, 128, 0, 9, "other chunk")]).check_overlap()


def test_check_mode_verifies_every_plan(monkeypatch):
    import ggpy.alloc.graph_allocator as ga

    real = ga.plan_graph

    def corrupt(*args, **kwargs):
        plan = real(*args, **kwargs)
        node_blocks = [b for b in plan.blocks if b.start >= 0 and not b.what.startswith("temp")]
        node_blocks[1].offset = node_blocks[0].offset    # h1 onto h0 while h0 is still being read
        return plan

    monkeypatch.setattr(ga, "plan_graph", corrupt)
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 3)
    graph = ggpy.Graph().build_forward_expand(hs[-1])
    with pytest.raises(ggpy.AllocationError, match="overlap"):
        ggpy.GraphAllocator(backend_of(), check=True).alloc_graph(graph)
    ggpy.GraphAllocator(backend_of(), check=False).alloc_graph(graph)   # without check: not looked at


def test_guard_bytes_catch_out_of_bounds_writes():
    ctx = ggpy.Context()
    x, ws, hs = _mm_chain(ctx, 2)
    hs[0].set_name("first")
    graph = ggpy.Graph().build_forward_expand(hs[-1])
    backend = backend_of()
    alloc = ggpy.GraphAllocator(backend, reuse=False, guard_bytes=64, check=True)
    alloc.alloc_graph(graph)
    rng = np.random.default_rng(19)
    for t in graph.leafs:
        t.set(rand(rng, t.shape))
    backend.compute(graph)
    alloc.check_guards(graph)
    t = hs[0]
    t.buffer.data[t.offset + t.nbytes] ^= 0xFF
    with pytest.raises(ggpy.AllocationError, match="first"):
        alloc.check_guards(graph)


def test_weights_in_their_own_buffer_survive_replanning():
    rng = np.random.default_rng(11)
    wctx = ggpy.Context()
    w = wctx.new_tensor(ggpy.F32, (8, 6)).set_name("w")
    bias = wctx.new_tensor(ggpy.F16, (6,)).set_name("bias")
    weights_buffer = ggpy.alloc_ctx_tensors(wctx, ggpy.CPUBackend(n_threads=2))
    wv, bv = rng.standard_normal((6, 8)), rng.standard_normal(6).astype(np.float16)
    w.set(wv)
    bias.set(bv)
    backend = ggpy.CPUBackend(n_threads=2)
    alloc = ggpy.GraphAllocator(backend, check=True)
    for n in (3, 5, 2):                       # every shape change re-plans the activations
        ctx = ggpy.Context()
        x = ctx.new_tensor(ggpy.F32, (8, n))
        y = ggpy.add(ggpy.mul_mat(w, x), bias)
        graph = ggpy.Graph().build_forward_expand(y)
        alloc.alloc_graph(graph)
        assert w.buffer is weights_buffer and bias.buffer is weights_buffer
        assert all(t.buffer is not weights_buffer for t in graph.nodes)
        xv = rng.standard_normal((n, 8))
        x.set(xv)
        backend.compute(graph)
        np.testing.assert_allclose(y.numpy(), xv @ wv.T + bv.astype(np.float64), rtol=1e-5, atol=1e-5)
    assert alloc.n_plans == 3
