"""Graph: a flat list of nodes in execution order, and the leafs (tensors no op makes)."""
from __future__ import annotations

from .tensor import Tensor


class Graph:
    """Nodes in execution order (ggml_cgraph). Tensors given to `build_forward_expand` are outputs."""

    def __init__(self):
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._visited: set[int] = set()
        self.version = 0          # bumped whenever nodes are added; backends key their caches on it
        self.plan = None          # the memory plan last applied by a GraphAllocator
        self.backend_cache = {}   # backend -> its bound program for (plan, version)

    def build_forward_expand(self, tensor: Tensor) -> Graph:
        """Append `tensor` and every tensor it depends on (depth first, sources before users)."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"build_forward_expand expects a ggpy Tensor, got {type(tensor).__name__}")
        tensor.set_output()
        stack = [(tensor, False)]
        while stack:
            t, expanded = stack.pop()
            if expanded:
                (self.nodes if t.op is not None else self.leafs).append(t)
                continue
            if id(t) in self._visited:
                continue
            self._visited.add(id(t))
            stack.append((t, True))
            for s in reversed(t.src):
                if s is not None and id(s) not in self._visited:
                    stack.append((s, False))
        self.version += 1
        return self

    def __len__(self) -> int:
        return len(self.nodes)

    def signature(self) -> tuple:
        """What a memory plan depends on: ops, types, shapes, strides, params, sources and flags."""
        index = {id(t): ("l", i) for i, t in enumerate(self.leafs)}
        index.update({id(t): ("n", i) for i, t in enumerate(self.nodes)})
        sig = []
        for t in self.leafs + self.nodes:
            sig.append((t.op, t.type.name, t.ne, t.nb, tuple(sorted(t.op_params.items())), t.flags,
                        tuple(index.get(id(s)) if s is not None else None for s in t.src),
                        index.get(id(t.view_src)) if t.view_src is not None else None, t.view_offs))
        return tuple(sig)

    # -- inspection -------------------------------------------------------------------------------
    def dump(self, backend=None) -> str:
        """A text table: one line per node and leaf with op, type, shape, bytes and sources; with a backend, the
        fused group each node belongs to (`g<k>`: one kernel computes the group)."""
        from .dump import dump_graph
        return dump_graph(self, backend.fused_runs(self) if backend is not None else ())

    def to_dot(self) -> str:
        """The graph in Graphviz dot syntax (nodes labelled with op, shape, type and bytes)."""
        from .dump import graph_to_dot
        return graph_to_dot(self)

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, {len(self.leafs)} leafs)"
