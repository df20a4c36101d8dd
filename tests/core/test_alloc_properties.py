"""Property-based tests of the graph allocator on random graphs (hypothesis).

A random program is a DAG of add/sub/mul/div, scale, clamp, unary ops, mul_mat and the views permute,
transpose, reshape and view_4d over random small shapes; tensors are read by several later nodes and
some nodes are marked as outputs. For each program:

- results with memory reuse equal the results without reuse (GraphAllocator(reuse=False)) and a
  float64 numpy evaluation of the program (which knows nothing of ggpy's memory);
- the placement is checked by the planner's own check (check=True) and by conftest.verify_placement;
- peak <= the no-reuse sum; outputs are readable, released intermediates raise AllocationError;
- temps requested on every node are never overlapped by live tensors and cost at most the largest one;
- a second graph built from the same program replays the plan (no re-planning);
- plans split over several buffers when the buffer type has a small maximum size.

The free list itself is checked against an independent model of best fit over address ranges.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggpy
from ggpy.alloc.dynamic import DynamicAllocator, align_up
from ggpy.backends.cpu import HostBufferType
from temp_backend import TempBackend

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
MAX_BOUND = 64.0

UNARY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "neg": lambda x: -x,
    "abs": np.abs,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
UNARY_BOUND = {"relu": None, "neg": None, "abs": None, "tanh": 1.0, "sigmoid": 1.0, "gelu": None, "silu": None}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


# -- random programs -------------------------------------------------------------------------------
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _factor4(data, n):
    """A random ne of 4 dims with product n."""
    ne = []
    for _ in range(3):
        d = data.draw(st.sampled_from(_divisors(n)))
        ne.append(d)
        n //= d
    ne.append(n)
    return tuple(ne)


class Program:
    """Steps that build a graph; `build(ctx)` replays them, so the same program gives identical graphs."""

    def __init__(self):
        self.steps = []            # (kind, args)
        self.outputs = []          # indices of tensors passed to build_forward_expand, in order
        self.bounds = []           # a bound on |value| of every tensor (keeps float32 far from overflow)
        self.leaf_kind = {}        # step index -> "any" | "positive"

    def build(self, ctx):
        ts = []
        for kind, args in self.steps:
            ts.append(_apply(ctx, ts, kind, args))
        return ts


def _apply(ctx, ts, kind, args):
    if kind == "leaf":
        return ctx.new_tensor(ggpy.F32, args[0])
    if kind in BINARY:
        return getattr(ggpy, kind)(ts[args[0]], ts[args[1]])
    if kind == "scale":
        return ggpy.scale(ts[args[0]], args[1], args[2])
    if kind == "clamp":
        return ggpy.clamp(ts[args[0]], -0.75, 0.5)
    if kind == "unary":
        return getattr(ggpy, args[1])(ts[args[0]])
    if kind == "mul_mat":
        return ggpy.mul_mat(ts[args[0]], ts[args[1]])
    if kind == "permute":
        return ggpy.permute(ts[args[0]], *args[1])
    if kind == "transpose":
        return ggpy.transpose(ts[args[0]])
    if kind == "reshape":
        return ggpy.reshape_4d(ts[args[0]], *args[1])
    if kind == "view":
        a = ts[args[0]]
        ne, offset = args[1], args[2]
        return ggpy.view_4d(a, *ne, a.nb[1], a.nb[2], a.nb[3], offset)
    raise AssertionError(kind)


dims = st.integers(1, 4)


@st.composite
def programs(draw, max_steps=20):
    data = draw(st.data())
    prog = Program()
    ctx = ggpy.Context()
    ts = []
    consumers = []

    def add(kind, args, bound, leaf_kind=None):
        ts.append(_apply(ctx, ts, kind, args))
        prog.steps.append((kind, args))
        prog.bounds.append(bound)
        consumers.append(0)
        if leaf_kind:
            prog.leaf_kind[len(ts) - 1] = leaf_kind
        return len(ts) - 1

    def use(*idx):
        for i in idx:
            consumers[i] += 1

    def new_leaf(ne, positive=False):
        return add("leaf", (tuple(ne),), 1.5 if positive else 1.0, "positive" if positive else "any")

    def pick():
        """A tensor to read: often a recent one (long chains), otherwise any (several readers)."""
        how = data.draw(st.integers(0, 3))
        if how <= 1:
            return len(ts) - 1
        if how == 2:
            return len(ts) - 1 - data.draw(st.integers(0, min(3, len(ts) - 1)))
        return data.draw(st.integers(0, len(ts) - 1))

    new_leaf(data.draw(st.tuples(dims, dims, dims, dims)))
    n_steps = data.draw(st.integers(3, max_steps))
    for _ in range(n_steps):
        i = pick()
        a = ts[i]
        ba = prog.bounds[i]
        kind = data.draw(st.sampled_from(["add", "sub", "mul", "div", "scale", "clamp", "unary", "unary",
                                          "mul_mat", "mul_mat", "permute", "transpose", "reshape", "view"]))
        if kind in ("add", "sub", "mul"):
            cands = [j for j, t in enumerate(ts) if all(t.ne[k] and a.ne[k] % t.ne[k] == 0 for k in range(4))]
            if data.draw(st.booleans()):
                j = data.draw(st.sampled_from(cands))
            else:
                j = new_leaf(tuple(data.draw(st.sampled_from(_divisors(n))) for n in a.ne))
            bound = ba + prog.bounds[j] if kind != "mul" else ba * prog.bounds[j]
            if bound > MAX_BOUND:
                use(i)
                add("unary", (i, "tanh"), 1.0)
                continue
            use(i, j)
            add(kind, (i, j), bound)
        elif kind == "div":                           # denominators: positive leafs in [0.75, 1.5)
            if 2.0 * ba > MAX_BOUND:
                use(i)
                add("unary", (i, "tanh"), 1.0)
                continue
            j = new_leaf(tuple(data.draw(st.sampled_from(_divisors(n))) for n in a.ne), positive=True)
            use(i, j)
            add("div", (i, j), 2.0 * ba)
        elif kind == "scale":
            s = data.draw(st.sampled_from([-1.5, -0.5, 0.25, 2.0]))
            b = data.draw(st.sampled_from([0.0, 0.5]))
            bound = ba * abs(s) + abs(b)
            if bound > MAX_BOUND:
                s, bound = 0.125, ba * 0.125 + abs(b)
            use(i)
            add("scale", (i, s, b), bound)
        elif kind == "clamp":
            use(i)
            add("clamp", (i,), 0.75)
        elif kind == "unary":
            name = data.draw(st.sampled_from(sorted(UNARY)))
            use(i)
            add("unary", (i, name), UNARY_BOUND[name] or ba)
        elif kind == "mul_mat":
            k = a.ne[0]
            cands = [j for j, t in enumerate(ts) if t.ne[0] == k and t.ne[2] % a.ne[2] == 0
                     and t.ne[3] % a.ne[3] == 0]
            if data.draw(st.booleans()):
                j = data.draw(st.sampled_from(cands))
            else:
                j = new_leaf((k, data.draw(dims), a.ne[2] * data.draw(st.integers(1, 2)), a.ne[3]))
            bound = k * ba * prog.bounds[j]
            if bound > MAX_BOUND:
                use(i)
                add("unary", (i, "tanh"), 1.0)
                continue
            use(i, j)
            add("mul_mat", (i, j), bound)
        elif kind == "permute":
            axes = tuple(data.draw(st.permutations([0, 1, 2, 3])))
            use(i)
            add("permute", (i, axes), ba)
        elif kind == "transpose":
            use(i)
            add("transpose", (i,), ba)
        elif kind == "reshape":
            if not a.is_contiguous():
                use(i)
                add("unary", (i, "neg"), ba)
                continue
            use(i)
            add("reshape", (i, _factor4(data, a.nelements)), ba)
        elif kind == "view":
            if a.nb[0] != a.type.size:
                use(i)
                add("transpose", (i,), ba)
                continue
            start = [data.draw(st.integers(0, n - 1)) for n in a.ne]
            ne = tuple(data.draw(st.integers(1, n - s)) for n, s in zip(a.ne, start))
            offset = sum(s * b for s, b in zip(start, a.nb))
            use(i)
            add("view", (i, ne, offset), ba)
    # outputs: every unread node, plus a few random nodes (some of them read by later nodes)
    nodes = [k for k, (kind, _) in enumerate(prog.steps) if kind != "leaf"]
    sinks = [k for k in nodes if consumers[k] == 0]
    extra = data.draw(st.lists(st.sampled_from(nodes), max_size=2, unique=True))
    outs = list(dict.fromkeys(sinks + extra))
    prog.outputs = data.draw(st.permutations(outs))
    return prog


def make_graph(prog):
    ctx = ggpy.Context()
    ts = prog.build(ctx)
    graph = ggpy.Graph()
    for k in prog.outputs:
        graph.build_forward_expand(ts[k])
    return ts, graph


def leaf_values(prog, seed):
    rng = np.random.default_rng(seed)
    vals = {}
    for k, (kind, args) in enumerate(prog.steps):
        if kind != "leaf":
            continue
        shape = tuple(reversed(args[0]))
        mag = rng.uniform(0.25, 1.0, size=shape)
        if prog.leaf_kind[k] == "positive":
            vals[k] = (0.5 + mag).astype(np.float32)
        else:
            vals[k] = (mag * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)
    return vals


# -- the independent float64 evaluation -----------------------------------------------------------------
def reference(prog, ts, vals):
    """float64 values of every tensor (numpy shape reversed(ne)); views read their base's contiguous
    float64 storage through their own ne, nb and offset, as a ggml view reads memory."""
    ref = []
    for k, (kind, args) in enumerate(prog.steps):
        t = ts[k]
        if kind == "leaf":
            r = vals[k].astype(np.float64)
        elif kind in BINARY:
            a, b = ref[args[0]], ref[args[1]]
            reps = tuple(x // y for x, y in zip(a.shape, b.shape))
            r = BINARY[kind](a, np.tile(b, reps))
        elif kind == "scale":
            r = ref[args[0]] * args[1] + args[2]
        elif kind == "clamp":
            r = np.clip(ref[args[0]], -0.75, 0.5)
        elif kind == "unary":
            r = UNARY[args[1]](ref[args[0]])
        elif kind == "mul_mat":
            a, b = ref[args[0]], ref[args[1]]        # (A3, A2, M, K), (B3, B2, N, K)
            a = np.repeat(np.repeat(a, b.shape[0] // a.shape[0], axis=0), b.shape[1] // a.shape[1], axis=1)
            r = np.einsum("xynk,xymk->xynm", b, a)
        else:                                         # a view
            base = t.view_src
            src_ref = ref[ts.index(base)]
            flat = np.ascontiguousarray(src_ref).reshape(-1)
            assert all(nb % 4 == 0 for nb in t.nb) and t.view_offs % 4 == 0
            r = np.lib.stride_tricks.as_strided(flat[t.view_offs // 4:], shape=tuple(reversed(t.ne)),
                                                strides=tuple(nb // 4 * 8 for nb in reversed(t.nb))).copy()
        ref.append(np.asarray(r, dtype=np.float64).reshape(tuple(reversed(t.ne))))
    return ref


def run(prog, backend, alloc_kw, seed, checker, temps_expected=None):
    ts, graph = make_graph(prog)
    alloc = ggpy.GraphAllocator(backend, check=True, **alloc_kw)
    plan = alloc.alloc_graph(graph)
    exp = temps_expected(graph) if temps_expected is not None else None
    checker(graph, alloc, temps_expected=exp)
    vals = leaf_values(prog, seed)
    for k, v in vals.items():
        if any(ts[k] is leaf for leaf in graph.leafs):
            ts[k].set(v)
    backend.compute(graph)
    outs = {k: ts[k].numpy() for k in prog.outputs}
    return ts, graph, alloc, plan, outs, vals


def assert_close_to_reference(prog, ts, outs, vals):
    ref = reference(prog, ts, vals)
    for k, got in outs.items():
        r = ref[k].reshape(got.shape)
        bound = max(1.0, prog.bounds[k])
        np.testing.assert_allclose(got.astype(np.float64), r, rtol=1e-3, atol=2e-4 * bound,
                                   err_msg=f"output {k} ({prog.steps[k][0]})")


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


# -- properties --------------------------------------------------------------------------------------
@settings(max_examples=150, **SETTINGS)
@given(prog=programs(), seed=st.integers(0, 2 ** 31))
def test_reuse_matches_no_reuse_and_float64(prog, seed, backend, placement_checker):
    ts, graph, alloc, plan, outs, vals = run(prog, backend, {}, seed, placement_checker)
    assert plan.peak_bytes <= plan.no_reuse_bytes
    assert_close_to_reference(prog, ts, outs, vals)

    # every tensor given to build_forward_expand is an output; an intermediate whose memory went back
    # to the heap refuses to be read; one that is kept (leaf, base of an output view) is readable
    kept = {id(t.view_src) for t in graph.nodes if t.is_output and t.view_src is not None}
    for t in graph.nodes:
        base = t.view_src if t.view_src is not None else t
        if t.is_output:
            continue
        if base.op is not None and not base.is_output and id(base) not in kept:
            with pytest.raises(ggpy.AllocationError, match="released"):
                t.numpy()
        else:
            t.numpy()

    # the same graph planned without reuse computes exactly the same values
    nr = ggpy.GraphAllocator(backend, reuse=False, check=True)
    nplan = nr.alloc_graph(graph)
    placement_checker(graph, nr)
    # without reuse every tensor keeps its own bytes; only temps (one node each) may share
    temp_bytes = sum(align_up(size, 64) for _, _, size in nplan.temps.values())
    assert nplan.no_reuse_bytes == plan.no_reuse_bytes
    assert nplan.no_reuse_bytes - temp_bytes <= nplan.peak_bytes <= nplan.no_reuse_bytes
    for leaf in graph.leafs:
        leaf.set(vals[ts.index(leaf)])
    backend.compute(graph)
    for k, got in outs.items():
        np.testing.assert_allclose(ts[k].numpy(), got, rtol=1e-6, atol=1e-7 * max(1.0, prog.bounds[k]))
    for t in graph.nodes:                           # nothing is released without reuse
        t.numpy()


@settings(max_examples=80, **SETTINGS)
@given(prog=programs(), seed=st.integers(0, 2 ** 31), sizes=st.lists(st.integers(1, 3000), min_size=1,
                                                                       max_size=8))
def test_temps_on_every_node(prog, seed, sizes, placement_checker):
    def size_of(node):
        return sizes[(node.ne[0] * 7 + node.ne[1] * 3 + len(node.op)) % len(sizes)]

    tb = TempBackend(size_of)
    ts, graph, alloc, plan, outs, vals = run(
        prog, tb, {}, seed, placement_checker,
        temps_expected=lambda g: {i: max(size_of(n), ggpy.CPUBackend.temp_size(tb, n))
                                  for i, n in enumerate(g.nodes)})
    assert_close_to_reference(prog, ts, outs, vals)
    assert len(plan.temps) == len(graph.nodes)

    # the same program without temps: temps live one node each, so the peak grows by the largest only
    ts2, graph2 = make_graph(prog)
    plain = ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=2)).alloc_graph(graph2)
    largest = max(align_up(s, 64) for _, _, s in plan.temps.values())
    assert plain.peak_bytes <= plan.peak_bytes <= plain.peak_bytes + largest
    assert plan.peak_bytes <= plan.no_reuse_bytes


@settings(max_examples=50, **SETTINGS)
@given(prog=programs(), seed=st.integers(0, 2 ** 31))
def test_second_graph_of_same_program_replays_the_plan(prog, seed, backend, placement_checker):
    alloc = ggpy.GraphAllocator(backend, check=True)
    ts1, g1 = make_graph(prog)
    alloc.reserve(g1)
    assert alloc.n_plans == 1
    placed = None
    for round_ in range(2):
        ts, graph = make_graph(prog)
        alloc.alloc_graph(graph)
        assert alloc.n_plans == 1
        placement_checker(graph, alloc)
        where = [(alloc.buffers.index(t.buffer), t.offset) for t in graph.leafs + graph.nodes]
        assert placed is None or where == placed
        placed = where
        vals = leaf_values(prog, seed + round_)
        for leaf in graph.leafs:
            leaf.set(vals[ts.index(leaf)])
        backend.compute(graph)
        outs = {k: ts[k].numpy() for k in prog.outputs}
        assert_close_to_reference(prog, ts, outs, vals)


@settings(max_examples=60, **SETTINGS)
@given(prog=programs(max_steps=10), seed=st.integers(0, 2 ** 31), slack=st.integers(0, 3))
def test_plan_split_over_buffers_with_a_small_max_size(prog, seed, slack, placement_checker):
    ts, graph = make_graph(prog)
    biggest = max(align_up(max(t.nbytes, 1), 64) for t in ts if t.view_src is None)
    unlimited = ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=2)).alloc_graph(graph)
    biggest = max([biggest] + [align_up(r.temp_bytes, 64) for r in unlimited.timeline])   # a node's temp: 1 buffer
    max_size = biggest + 64 * slack
    backend = ggpy.CPUBackend(n_threads=2, buffer_type=HostBufferType(max_size=max_size))
    ts, graph, alloc, plan, outs, vals = run(prog, backend, {}, seed, placement_checker)
    assert all(s <= max_size for s in plan.chunk_sizes)
    assert all(b.size <= max_size for b in alloc.buffers)
    assert plan.peak_bytes <= plan.no_reuse_bytes
    assert_close_to_reference(prog, ts, outs, vals)


# -- the free list against a model --------------------------------------------------------------------------
def _model_alloc(live, max_size, size):
    """Where best fit must put `size` bytes: the smallest hole between live blocks of any chunk (ties: the
    first chunk, the lowest offset); else the open end of the first chunk it fits; else a new chunk."""
    n_chunks = len(live)
    best = None
    for c in range(n_chunks):
        blocks = sorted(live[c])
        pos = 0
        for off, sz in blocks:
            hole = off - pos
            if hole >= size and (best is None or hole < best[0]):
                best = (hole, c, pos)
            pos = max(pos, off + sz)
    if best is not None:
        return best[1], best[2]
    for c in range(n_chunks):
        end = max((off + sz for off, sz in live[c]), default=0)
        if max_size - end >= size:
            return c, end
    return n_chunks, 0


sizes_st = st.one_of(st.integers(1, 256), st.sampled_from([16, 64, 100, 128, 200]))


@settings(max_examples=300, deadline=None)
@given(align=st.sampled_from([1, 16, 64]), max_size=st.sampled_from([256, 1024, 1 << 30]),
       first=st.lists(sizes_st, min_size=3, max_size=20),
       ops=st.lists(st.tuples(st.booleans(), sizes_st, st.integers(0, 1000)), min_size=1, max_size=60))
def test_dynamic_allocator_matches_best_fit_model(align, max_size, first, ops):
    """Allocate a batch, then free and allocate at random, comparing every placement with the model."""
    ops = [(True, size, 0) for size in first] + ops
    d = DynamicAllocator(align, max_size)
    live = []                    # per chunk: list of (offset, aligned size)
    owned = []                   # (chunk, offset, requested size)
    for do_alloc, size, pick in ops:
        if do_alloc or not owned:
            want = _model_alloc(live, max_size, align_up(size, align))
            got = d.alloc(size)
            assert got == want, (got, want, live)
            c, off = got
            assert off % align == 0 and off + align_up(size, align) <= max_size
            while len(live) <= c:
                live.append([])
            live[c].append((off, align_up(size, align)))
            owned.append((c, off, size))
        else:
            c, off, size = owned.pop(pick % len(owned))
            d.free(c, off, size)
            live[c].remove((off, align_up(size, align)))
        # free lists stay sorted, merged, and are exactly the complement of the live blocks
        for c, chunk in enumerate(d.chunks):
            free = chunk.free
            assert all(free[k][0] + free[k][1] < free[k + 1][0] for k in range(len(free) - 1))
            used = sum(sz for _, sz in live[c])
            assert used + sum(sz for _, sz in free) == max_size
            assert free[-1][0] + free[-1][1] == max_size
            assert chunk.high >= max((off + sz for off, sz in live[c]), default=0)
            assert chunk.high <= max_size
    for c, off, size in owned:
        d.free(c, off, size)
    assert all(chunk.free == [[0, max_size]] for chunk in d.chunks)
