"""Scheduler: one graph evaluated across several backends (ggml_backend_sched).

Assignment, in graph order (`backends` in priority order, the CPU last):
  * a node the user pinned (`set_backend`, `with sched.on(backend)`) runs there;
  * a view (reshape, permute, ...; also cpy, which writes into its destination) stays with the tensor whose
    bytes it shows;
  * otherwise the candidates are, in this order: the backends holding the node's weights (leafs with memory
    of their own) - weights in host memory only when `offload_host_weights=False` -, the previous node's
    backend unless that is the last (fallback) one, then every backend by priority; the first that
    `supports_op` the node gets it. An op a backend refuses therefore falls back to the next one.
  * graph inputs (leafs with no memory) live on the last backend (the host), unless pinned - or unless one
    backend runs every node: then the graph is one split and its inputs live in that backend's memory, where
    `tensor.set` writes them (no copy through the host per compute).

A split is a run of consecutive computing nodes on one backend. A source a split reads from another backend
is copied into a tensor of that backend's memory (one copy per (tensor, backend), made before the first split
that needs it, on every compute); weights are copied once, into a persistent buffer of the backend, at the
first compute (`n_uploads` counts them; `invalidate_weights()` uploads them again).

Memory: each backend plans the nodes it runs (views, its leafs and its copies included) as one graph with its
own GraphAllocator, so a backend has one plan, replayed while the graph and its shapes are unchanged. A tensor
read outside the split that makes it is kept (treated as an output) while planning and binding kernels, so no
fusion or in-place reuse drops it before the copy or later split reads it.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..alloc import GraphAllocator
from ..backends.base import COMPUTE
from ..alloc.tensor_alloc import alloc_tensors
from ..errors import AllocationError, UnsupportedOpError
from ..graph import FLAG_OUTPUT, Graph, Tensor
from ..graph.tensor import creation_hook
from ..optable import is_view

def _base(t):
    return t.view_src if t.view_src is not None else t


def _is_constant(t) -> bool:
    """A weight: a leaf (or a view of one), not a graph input, whose memory the user placed (not a graph
    allocator's). Inputs are copied on every compute; weights once."""
    b = _base(t)
    return (b.op is None and not b.is_input and not t.is_input and b.buffer is not None
            and not b.buffer.usage == COMPUTE)


def _label(t) -> str:
    return t.name or f"{t.op or 'leaf'}@{id(t) & 0xffff:04x}"


class Split:
    """A run of consecutive computing nodes on one backend, the copies made before it, and its graph."""

    def __init__(self, index: int, backend):
        self.index = index
        self.backend = backend
        self.nodes = []           # computing nodes, in order
        self.inputs = []          # (source tensor, copy tensor) copied in before this split runs
        self.graph = None         # Graph of this split's nodes (and views of them) that the backend computes

    def __repr__(self) -> str:
        return f"Split({self.index}, {self.backend.name}, {len(self.nodes)} nodes, {len(self.inputs)} inputs)"


class _State:
    """Everything derived from one graph: assignment, splits, copies and per-backend graphs."""

    def __init__(self, graph):
        self.graph = graph
        self.version = graph.version
        self.backend_of = {}      # id(tensor) -> backend
        self.splits: list[Split] = []
        self.rewire = {}          # id(node) -> the node's sources as its backend sees them (copies)
        self.keep = set()         # ids of tensors read outside their split: outputs of the scheduler's wiring
        self.wired = {}           # id(user tensor) -> (user tensor, the scheduler's own node for it)
        self.sub_graphs = {}      # backend -> Graph (of the scheduler's nodes) planned by that backend's allocator
        self.weights = []         # [weight, copy, uploaded, backend] entries this graph uses


class Scheduler:
    """Evaluates graphs across `backends` (priority order; the CPU, which runs every op, last).

    sched = Scheduler([cuda, cpu]); sched.alloc_graph(graph); x.set(...); sched.compute(graph)
    """

    def __init__(self, backends, *, offload_host_weights: bool = True):
        self.backends = list(backends)
        if not self.backends:
            raise ValueError("Scheduler needs at least one backend")
        if len(set(map(id, self.backends))) != len(self.backends):
            raise ValueError("Scheduler: a backend is listed twice")
        self.offload_host_weights = bool(offload_host_weights)
        self.allocators = {b: GraphAllocator(b) for b in self.backends}
        self._pins = {}           # id(tensor) -> (tensor, backend)
        self._weight_copies = {}  # (id(weight), id(backend)) -> [weight, copy, uploaded]
        self._weight_buffers = []
        self._state: _State | None = None
        self.n_uploads = 0        # weight copies made (each weight once per backend that needs it)
        self.n_copies = 0         # activation copies made, all computes together
        self.n_splits_run = 0

    # -- pinning ---------------------------------------------------------------------------------------
    def _check_backend(self, backend):
        if not any(b is backend for b in self.backends):
            raise ValueError(f"backend {getattr(backend, 'name', backend)!r} is not one of this scheduler's "
                             f"({', '.join(b.name for b in self.backends)})")

    def set_backend(self, tensor, backend):
        """Run `tensor` (a node; or a graph input, to place it there) on `backend`."""
        self._check_backend(backend)
        self._pins[id(tensor)] = (tensor, backend)
        self._state = None

    def get_backend(self, tensor):
        """The backend that runs (or holds) `tensor` in the graph last scheduled, or its pin, or None."""
        if self._state is not None and id(tensor) in self._state.backend_of:
            return self._state.backend_of[id(tensor)]
        pin = self._pins.get(id(tensor))
        return pin[1] if pin is not None else None

    @contextmanager
    def on(self, backend):
        """Pin every tensor made inside the block (by ops on any Context) to `backend`."""
        self._check_backend(backend)

        def pin(t):
            self._pins[id(t)] = (t, backend)
        try:
            with creation_hook(pin):
                yield self
        finally:
            self._state = None

    # -- assignment ------------------------------------------------------------------------------------
    def _backend_of_buffer(self, t):
        buf = _base(t).buffer
        for b in self.backends:
            if buf.buffer_type is b.buffer_type:
                return b
        if buf.buffer_type.is_host:
            hosts = [b for b in self.backends if b.buffer_type.is_host]
            if hosts:
                return hosts[-1]
        for b in self.backends:
            if b.buffer_type.name == buf.buffer_type.name and type(b.buffer_type) is type(buf.buffer_type):
                return b
        raise AllocationError(f"tensor '{t.name}' lives in a {buf.buffer_type.name} buffer, which none of the "
                              f"scheduler's backends ({', '.join(b.name for b in self.backends)}) owns")

    def _assign(self, graph, st: _State):
        last = self.backends[-1]
        where = st.backend_of
        unplaced = []             # ids of leafs placed by default (inputs, memoryless leafs): on the host
        for leaf in graph.leafs:
            pin = self._pins.get(id(leaf))
            if leaf.buffer is not None and not leaf.buffer.usage == COMPUTE:
                where[id(leaf)] = self._backend_of_buffer(leaf)
            elif pin is not None:
                where[id(leaf)] = pin[1]
            else:
                where[id(leaf)] = last
                unplaced.append(id(leaf))
        prev = None
        for node in graph.nodes:
            pin = self._pins.get(id(node))
            if node.view_src is not None:
                base = node.view_src
                b = where.get(id(base))
                if b is None:
                    placed = base.buffer is not None and not base.buffer.usage == COMPUTE
                    b = self._backend_of_buffer(base) if placed else (pin[1] if pin else last)
                    where[id(base)] = b
            elif pin is not None:
                b = pin[1]
            else:
                cands = []
                for s in node.src:
                    if s is not None and _is_constant(s):
                        wb = where.get(id(_base(s))) or self._backend_of_buffer(s)
                        if not (self.offload_host_weights and wb is last):
                            cands.append(wb)
                if prev is not None and prev is not last:
                    cands.append(prev)
                cands += self.backends
                b = next((c for c in cands if c.supports_op(node)), None)
                if b is None:
                    self.backends[-1].check_supported(_one_node_graph(node))
                    raise UnsupportedOpError(f"no backend of the scheduler runs node '{node.name}' op={node.op}")
            if not is_view(node) and not b.supports_op(node):
                raise UnsupportedOpError(f"node '{node.name}' op={node.op} is pinned (or written through a view) "
                                         f"to backend {b.name}, which does not support it")
            where[id(node)] = b
            if not is_view(node):
                prev = b
        ran = {id(where[id(n)]): where[id(n)] for n in graph.nodes if not is_view(n)}
        if len(ran) == 1:         # one backend runs every node: the default-placed leafs (and their views) go there
            only, moved = next(iter(ran.values())), set(unplaced)
            for t in graph.leafs + graph.nodes:
                if id(t) in moved or (is_view(t) and id(t.view_src) in moved):
                    where[id(t)] = only

    # -- splitting ---------------------------------------------------------------------------------------
    def _split(self, graph, st: _State):
        where = st.backend_of
        split_of = {}
        for node in graph.nodes:
            if is_view(node):
                continue
            b = where[id(node)]
            if not st.splits or st.splits[-1].backend is not b:
                st.splits.append(Split(len(st.splits), b))
            st.splits[-1].nodes.append(node)
            split_of[id(node)] = st.splits[-1]

        def producer(t):
            """The split whose nodes write `t`'s bytes (None for leafs and views of leafs)."""
            b = _base(t)
            sp = split_of.get(id(t)) if not is_view(t) else None
            return sp if sp is not None else split_of.get(id(b))

        copies = {}
        for sp in st.splits:
            for node in sp.nodes:
                srcs = []
                changed = False
                for s in node.src:
                    if s is None:
                        srcs.append(None)
                        continue
                    ps = producer(s)
                    if ps is not None and ps is not sp:
                        st.keep.update((id(s), id(_base(s))))
                    sb = where.get(id(s)) or where.get(id(_base(s)))
                    if sb is sp.backend:
                        srcs.append(s)
                        continue
                    changed = True
                    key = (id(s), id(sp.backend))
                    if _is_constant(s):
                        entry = self._weight_copies.get(key)
                        if entry is None or entry[0] is not s:
                            entry = [s, _copy_tensor(s, sp.backend), False, sp.backend]
                            self._weight_copies[key] = entry
                        if all(e is not entry for e in st.weights):
                            st.weights.append(entry)
                        srcs.append(entry[1])
                        continue
                    c = copies.get(key)
                    if c is None:
                        c = copies[key] = _copy_tensor(s, sp.backend)
                        sp.inputs.append((s, c))
                    srcs.append(c)
                if changed:
                    st.rewire[id(node)] = srcs
        self._wire(graph, st)
        # each split's graph: its nodes, and the views of what it makes (so fusions see every reader)
        views_of = {}
        for node in graph.nodes:
            if is_view(node):
                sp = split_of.get(id(node.view_src))
                if sp is not None:
                    views_of.setdefault(id(sp), []).append(node)
        wired = self._wired
        for sp in st.splits:
            members = {id(n) for n in sp.nodes} | {id(v) for v in views_of.get(id(sp), [])}
            g = Graph()
            g.nodes = [wired(st, n) for n in graph.nodes if id(n) in members]
            g.version = 1
            sp.graph = g
        # each backend's graph: its leafs, its copies and every node (views too) it holds
        for b in self.backends:
            g = Graph()
            g.leafs = [t for t in graph.leafs if where[id(t)] is b]
            g.leafs += [c for (_, bid), c in copies.items() if bid == id(b)]
            g.nodes = [wired(st, n) for n in graph.nodes if where[id(n)] is b]
            g.version = 1
            if g.nodes or g.leafs:
                st.sub_graphs[b] = g

    @staticmethod
    def _wire(graph, st: _State):
        """The scheduler's own node for every node of `graph` (ggml's scheduler works on its own graph copy): the
        same op, shape and parameters, reading its backend's copies where the split needs them, marked as an
        output where another split or a copy reads it. The user's tensors keep their sources and flags."""
        wired = Scheduler._wired
        for node in graph.nodes:
            srcs = st.rewire.get(id(node), node.src)
            own = Tensor(None, node.type, node.ne, nb=node.nb, op=node.op,
                         src=[None if s is None else wired(st, s) for s in srcs], op_params=node.op_params,
                         view_src=None if node.view_src is None else wired(st, node.view_src),
                         view_offs=node.view_offs)
            own.name = node.name
            own.flags = node.flags | (FLAG_OUTPUT if id(node) in st.keep else 0)
            st.wired[id(node)] = (node, own)

    @staticmethod
    def _wired(st: _State, t):
        """The scheduler's node for the user's tensor t (t itself for leafs)."""
        return st.wired.get(id(t), (t, t))[1]

    @staticmethod
    def _place_user_tensors(st: _State):
        """Give the user's nodes the memory the plans gave the scheduler's, so that t.numpy() reads results."""
        for user, own in st.wired.values():
            user.buffer, user.offset, user.released = own.buffer, own.offset, own.released

    # -- planning and evaluation -----------------------------------------------------------------------
    def _schedule(self, graph) -> _State:
        st = _State(graph)
        self._assign(graph, st)
        self._split(graph, st)
        return st

    def reserve(self, graph):
        """Plan `graph` (the worst case) on each backend it uses and allocate their buffers, placing nothing: later
        graphs that need no more memory are planned without growing them (GraphAllocator.reserve)."""
        for b, g in self._schedule(graph).sub_graphs.items():
            self.allocators[b].reserve(g)

    def alloc_graph(self, graph) -> list:
        """Assign, split and plan `graph` (the plans are replayed when an equal graph was planned before);
        returns the splits. Graph inputs get their memory here: set them after this call."""
        st = self._schedule(graph)
        self._alloc_weights(st)
        for b, g in st.sub_graphs.items():
            plan = self.allocators[b].alloc_graph(g)
            for sp in st.splits:
                if sp.backend is b:
                    sp.graph.plan = plan
        self._place_user_tensors(st)
        self._state = st
        return st.splits

    def _alloc_weights(self, st: _State):
        """Memory for weight copies that have none yet: one new buffer per backend."""
        by_backend = {}
        for _, c, _, b in st.weights:
            if c.buffer is None:
                by_backend.setdefault(id(b), (b, []))[1].append(c)
        for b, cs in by_backend.values():
            self._weight_buffers.append(alloc_tensors(cs, b))

    def invalidate_weights(self):
        """Copy the weights again at the next compute (after their values changed)."""
        for entry in self._weight_copies.values():
            entry[2] = False

    def _ensure(self, graph) -> _State:
        st = self._state
        if st is None or st.graph is not graph or st.version != graph.version:
            self.alloc_graph(graph)
            st = self._state
        return st

    def _run(self, graph, run_split):
        """Weight uploads (first time), then run_split(split) for each split after copying in its inputs."""
        st = self._ensure(graph)
        for entry in st.weights:
            if not entry[2]:
                _copy(entry[0], entry[1])
                entry[2] = True
                self.n_uploads += 1
        for sp in st.splits:
            for src, c in sp.inputs:
                _copy(self._wired(st, src), c)
                self.n_copies += 1
            run_split(sp)
            self.n_splits_run += 1
        return st

    def compute_async(self, graph):
        """Evaluate `graph`, queueing each split where its backend can (CUDA): the copies between splits read
        their sources after the work queued before them, so only the last split may still run on return."""
        self._run(graph, lambda sp: sp.backend.compute_async(sp.graph))

    def compute(self, graph):
        """Evaluate `graph` (compute_async, then wait for every backend)."""
        self.compute_async(graph)
        self.synchronize()

    def profile(self, graph) -> list:
        """Evaluate `graph` once, timing every kernel: each split's Backend.profile rows in order, with the user's
        node of each row (Timing.node)."""
        rows = []
        st = self._run(graph, lambda sp: rows.extend(sp.backend.profile(sp.graph)))
        users = {id(own): user for user, own in st.wired.values()}
        return [row._replace(node=users.get(id(row.node), row.node)) for row in rows]

    def synchronize(self):
        for b in self.backends:
            b.synchronize()

    # -- inspection --------------------------------------------------------------------------------------
    @property
    def graph(self):
        """The graph planned last (None before the first, or after a pin changed the assignment)."""
        return self._state.graph if self._state is not None else None

    @property
    def splits(self) -> list:
        return self._state.splits if self._state is not None else []

    def dump(self) -> str:
        """The schedule as text: where each graph input lives, per split its backend, the copies made before it,
        and each node's kernel."""
        st = self._state
        if st is None:
            return "scheduler: no graph scheduled (call alloc_graph or compute first)"
        n_copy = sum(len(sp.inputs) for sp in st.splits)
        copy_bytes = sum(c.nbytes for sp in st.splits for _, c in sp.inputs)
        lines = [(f"scheduler: {len(st.splits)} split(s) over {', '.join(b.name for b in self.backends)}; "
                  f"{n_copy} copies per compute ({copy_bytes} bytes); {len(st.weights)} weight copies "
                  f"({sum(e[1].nbytes for e in st.weights)} bytes, uploaded once)")]
        for leaf in st.graph.leafs:
            if leaf.is_input:
                lines.append(f"input {_label(leaf)} {leaf.type.name}{list(leaf.ne)} in {st.backend_of[id(leaf)].name}")
        index = {id(n): i for i, n in enumerate(st.graph.nodes)}
        for sp in st.splits:
            lines.append(f"split {sp.index}: {sp.backend.name}, {len(sp.nodes)} node(s)")
            for src, c in sp.inputs:
                lines.append(f"  copy  {_label(src)} {c.type.name}{list(c.ne)} "
                             f"{st.backend_of.get(id(_base(src))).name} -> {sp.backend.name}")
            for node in sp.nodes:
                pinned = " (pinned)" if id(node) in self._pins else ""
                kernel = sp.backend.kernel_name(self._wired(st, node))
                lines.append(f"  n{index[id(node)]:<4} {node.op:<16} {sp.backend.name:<8} {kernel:<24} "
                             f"{_label(node)}{pinned}")
        for b, g in st.sub_graphs.items():
            plan = getattr(g, "plan", None)
            if plan is not None:
                lines.append(f"memory {b.name}: planned {plan.peak_bytes} bytes in {len(plan.chunk_sizes)} buffer(s)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Scheduler([{', '.join(b.name for b in self.backends)}])"


def _copy_tensor(t, backend) -> Tensor:
    """A contiguous leaf with `t`'s type and shape, to hold `t`'s values on `backend`."""
    c = Tensor(None, t.type, t.ne)
    c.name = f"{t.name or t.op or 'leaf'}#{backend.name}"
    return c


def _copy(src, dst):
    """dst (another backend's memory) <- src's values (through the host)."""
    dst.buffer.set_tensor(dst, src.buffer.get_tensor(src))


def _one_node_graph(node) -> Graph:
    g = Graph()
    g.nodes = [node]
    return g
