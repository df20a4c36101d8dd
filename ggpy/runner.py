"""GraphRunner: the one way to run a built graph, over one backend or a Scheduler."""
from __future__ import annotations

import numpy as np

from .alloc import GraphAllocator
from .backends.base import Backend
from .errors import AllocationError, TensorNameError
from .graph import Graph, Tensor
from .sched import Scheduler


class GraphRunner:
    """Plans a built graph once, takes its inputs by name, evaluates it and gives its outputs by name.

    Named for the one thing it does: it runs a graph that is already built (ggml's gallocr + graph_compute, or
    sched_alloc_graph + sched_graph_compute, behind one object); it neither builds graphs nor owns backends.

        run = GraphRunner(graph, backend)               # or GraphRunner(graph, [cuda, cpu]): a Scheduler's splits
        run.set(x=array)                                # or run["x"] = array: numpy shape reversed(ne)
        run.compute()                                   # queued where the backend can (CUDA), else run
        y = run.get("y")                                # numpy shape reversed(ne), once the work is done

    The same over one backend or a Scheduler. The graph is planned (and its kernels bound) here and again only when
    it changes (nodes added: graph.version; or another graph given to `use`); every input is set after each plan,
    before the compute that reads it (a new plan may move the inputs: compute refuses inputs not set since).
    """

    def __init__(self, graph, on, *, reserve: Graph | None = None, keep: int = 8):
        """graph: a Graph, or a function returning one (called here), or None (nothing to run until `use`). on: a
        Backend; or a Scheduler, or a list of backends in priority order (the CPU last) for a Scheduler of this
        runner's own, for graphs that one backend may not run whole. reserve: a worst-case graph whose memory is
        reserved first, so that the graphs run later (`use`) that need no more are planned without growing the
        buffers. keep: how many planned graphs `use` keeps ready to switch back to (one backend)."""
        self.keep = keep
        self.sched = Scheduler(on) if isinstance(on, (list, tuple)) else on if isinstance(on, Scheduler) else None
        self.allocator = None if self.sched is not None else GraphAllocator(on)
        if reserve is not None:
            (self.sched or self.allocator).reserve(reserve)
        self.graph = None
        self._kept = {}             # id(graph) -> its plan's state, for `use` to switch back to (one backend)
        self._in_flight = False     # a compute queued and not waited for (its staged inputs may be unread)
        if graph is not None:
            self.use(graph)

    @property
    def backends(self) -> list:
        """The backends that may run the graph (priority order; the CPU, when there, last)."""
        return self.sched.backends if self.sched is not None else [self.allocator.backend]

    def use(self, graph) -> GraphRunner:
        """Run `graph` (a Graph, or a function returning one) from now on: planned now (a graph equal in structure
        and shapes to the one planned before replays its plan). On one backend the last `keep` graphs planned stay
        ready: switching back to one whose plan still fits the buffers (none grew since) plans nothing, its bound
        kernels and CUDA graph are replayed (its inputs must be set again: the graphs share the memory)."""
        graph = graph if isinstance(graph, Graph) else graph()
        if not isinstance(graph, Graph):
            raise TypeError(f"GraphRunner runs a ggpy Graph (or a function returning one), got {type(graph).__name__}")
        self.graph = graph
        state = self._kept.get(id(graph))
        if state is not None and state[0] is graph and state[1] == self._still(graph):
            (self._version, self._stamp, self._inputs, self._outputs, self._input_ids, self._output_ids,
             self._staging) = state[2:]
            self._unset, self._computed = dict(self._input_ids), False
        else:
            self._plan()
        return self

    def _still(self, graph) -> tuple:
        """What must be unchanged for a kept graph's plan to hold: its version and plan, and the buffers."""
        return graph.version, id(graph.plan), tuple(id(b) for b in self.allocator.buffers)

    def _plan(self):
        if self.sched is not None:
            self.sched.alloc_graph(self.graph)
        else:
            self.allocator.alloc_graph(self.graph)
        self._bind()

    def _bind(self):
        """Bind the kernels of the graph's current plan and stage its inputs and outputs (all inputs unset)."""
        g = self.graph
        for backend, planned in self._runs():
            backend.program(planned)             # kernels bound now, not in the first compute
        self._version, self._stamp = g.version, Backend.plan_stamp(g)
        inputs = [t for t in g.leafs if t.is_input]
        outputs = [t for t in g.nodes if t.is_output] + [t for t in g.leafs if not t.is_input]
        self._inputs, self._outputs = _by_name(inputs), _by_name(outputs)
        self._staging = None if self.sched is not None else self.allocator.backend.stage(
            g, inputs, [t for t in g.nodes if t.is_output])
        self._input_ids, self._output_ids = {id(t): t for t in inputs}, {id(t): t for t in outputs}
        self._unset = dict(self._input_ids)
        self._computed = False
        if self.sched is None:
            self._kept.pop(id(g), None)
            self._kept[id(g)] = (g, self._still(g), self._version, self._stamp, self._inputs, self._outputs, self._input_ids,
                                 self._output_ids, self._staging)
            while len(self._kept) > self.keep:
                del self._kept[next(iter(self._kept))]

    def _runs(self) -> list:
        """(backend, planned graph) of each split, in order (the graph itself on one backend)."""
        if self.sched is not None:
            return [(sp.backend, sp.graph) for sp in self.sched.splits]
        return [(self.allocator.backend, self.graph)]

    def _ensure(self):
        """Plan again when the graph changed (or a pin of the Scheduler did)."""
        if self.graph is None:
            raise AllocationError("GraphRunner: no graph to run yet; give it one with use(graph)")
        planned = self.graph if self.sched is None else self.sched.graph
        if planned is not None and planned is not self.graph:
            raise AllocationError("GraphRunner: its Scheduler has planned another graph since (each Scheduler holds "
                                  "one plan per backend): give each GraphRunner a Scheduler, or list of backends, of "
                                  "its own")
        if planned is None or self.graph.version != self._version:
            self._plan()
        elif self.sched is None and self._stamp != Backend.plan_stamp(self.graph):
            self._bind()                    # planned again outside the runner (GraphAllocator.alloc_graph): new buffers

    @property
    def plans(self) -> tuple:
        """The memory plan of each split (one on one backend; splits on one backend share its plan), the same
        objects while the graph is not planned again (planned first if it changed)."""
        self._ensure()
        return tuple(planned.plan for _, planned in self._runs())

    @property
    def inputs(self) -> dict:
        """{name: Tensor} of the graph's named inputs (leafs marked set_input)."""
        self._ensure()
        return {k: t for k, t in self._inputs.items() if t is not None}

    @property
    def outputs(self) -> dict:
        """{name: Tensor} of what `get` reads by name: the graph's outputs (set_output, or given to
        build_forward_expand) and its other leafs (weights, stores)."""
        self._ensure()
        return {k: t for k, t in self._outputs.items() if t is not None}

    # -- inputs, evaluation, outputs -----------------------------------------------------------------------
    def set(self, **arrays) -> GraphRunner:
        """Write each named input: an array of the tensor's numpy shape, reversed(ne) without trailing 1s, or the full
        reversed(ne) (Tensor.set; ShapeError or TypeMismatchError naming the tensor otherwise)."""
        self._ensure()
        for name, array in arrays.items():
            self._write(name, array)
        return self

    def __setitem__(self, key, array):
        """runner[name or input Tensor] = array (as `set`)."""
        self._ensure()
        self._write(key, array)

    def _write(self, key, array):
        t = _find(key, self._inputs, self._input_ids, "input")
        if self._staging is not None and self._staging.has(t):
            if self._in_flight:             # the last compute's upload may not have read the staged values yet
                self.synchronize()
            self._staging.write(t, array)
        else:
            t.set(array)
        self._unset.pop(id(t), None)

    def compute(self) -> GraphRunner:
        """Evaluate the graph on the inputs set: queued where the backend can (CUDA: `synchronize` or `get` waits for
        it), else run before returning."""
        self._ready()
        if self.sched is not None:
            self.sched.compute_async(self.graph)
        else:
            self.allocator.backend.compute_async(self.graph)
        self._in_flight = True
        return self

    def _ready(self):
        """Plan again if the graph changed; AllocationError naming the inputs not set since the last plan."""
        self._ensure()
        if self._unset:
            names = ", ".join(_label(t) for t in self._unset.values())
            raise AllocationError(f"GraphRunner: input(s) {names} not set since the graph was planned; set every "
                                  "input (runner.set(name=array)) before computing")
        self._computed = True

    def synchronize(self) -> GraphRunner:
        """Wait until the work queued by `compute` is done."""
        for backend in self.backends:
            backend.synchronize()
        self._in_flight = False
        return self

    def get(self, key) -> np.ndarray:
        """The values of a named output (or an output Tensor of the graph), numpy shape reversed(ne) without
        trailing 1s (Tensor.numpy), once the last compute is done."""
        self._ensure()
        t = _find(key, self._outputs, self._output_ids, "output")
        if not self._computed and t.op is not None:
            raise AllocationError(f"GraphRunner: output {_label(t)} read before any compute of the planned graph; "
                                  "call compute() first")
        self.synchronize()
        return self._staging.read(t) if self._staging is not None and self._staging.has(t) else t.numpy()

    def staged(self, key) -> np.ndarray | None:
        """The pinned host array (numpy, shape reversed(ne)) that a named input (or output) of the planned graph is
        staged in, for a caller's per-token loop: an input written there counts as set and is uploaded by the next
        compute (write it only when nothing is in flight: after `synchronize`); an output's holds its values once
        the compute that downloads it is waited for. Valid until another plan (`use` of another graph). None where
        the runner does not stage the tensor (a CPU backend, a Scheduler, a big tensor)."""
        self._ensure()
        t = self._inputs.get(key) or self._outputs.get(key) if isinstance(key, str) else key
        if self._staging is None or t is None or not self._staging.has(t):
            return None
        self._unset.pop(id(t), None)
        return self._staging.view(t)

    def profile(self) -> list:
        """Evaluate once, timing every kernel: [Timing(node, kernel name, seconds)] in order (Backend.profile)."""
        self._ready()
        if self.sched is not None:
            return self.sched.profile(self.graph)
        return self.allocator.backend.profile(self.graph)

    def dump(self) -> str:
        """The plan as text: the Scheduler's splits and copies, or the graph's table with its fused groups."""
        self._ensure()
        return self.sched.dump() if self.sched is not None else self.graph.dump(self.allocator.backend)

    def __repr__(self) -> str:
        return f"GraphRunner({self.graph!r} on {self.sched or self.allocator.backend.name})"


def _label(t: Tensor) -> str:
    return repr(t.name) if t.name else f"<unnamed {t.type.name}{list(t.ne)}>"


def _by_name(tensors) -> dict:
    """{name: tensor} of the named tensors; a name two of them share maps to None (ambiguous)."""
    out = {}
    for t in tensors:
        if t.name:
            out[t.name] = None if t.name in out and out[t.name] is not t else t
    return out


def _find(key, named: dict, members: dict, what: str) -> Tensor:
    """The tensor `key` (a name, or a Tensor) stands for among the graph's `what`s (`members` by id, `named` by name),
    or TensorNameError saying what was given and what the graph has. One dictionary look-up either way (a graph's
    leafs, its weights, may number hundreds: per-token reads stay as cheap as a direct Tensor.numpy)."""
    if isinstance(key, Tensor):
        if members.get(id(key)) is key:
            return key
        raise TensorNameError(f"tensor {_label(key)} is not an {what} of this graph (inputs: leafs marked set_input(); "
                              "outputs: tensors marked set_output() or given to build_forward_expand, and leafs)")
    t = named.get(key)
    if t is None:
        known = ", ".join(sorted(k for k, v in named.items() if v is not None)) or "none"
        why = "names more than one tensor" if key in named else "is not one of its names"
        raise TensorNameError(f"{what} {key!r} {why}; this graph's {what}s: {known}")
    return t
