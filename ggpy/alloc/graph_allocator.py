"""GraphAllocator: plans a graph's memory once, owns the backend buffers, and replays the plan."""
from __future__ import annotations

import itertools

from ..backends.base import COMPUTE
from ..errors import AllocationError
from .plan import Plan
from .planner import plan_graph

POISON_BYTE = 0xFF
"""What a checking plan (guard_bytes > 0) fills every block with: tensors, temps and their guards. 0xFFFF.. is a
NaN in F32, F16 and BF16 (and -1 in I32), so an output a kernel never writes, an accumulator it never zeroes, or a
read past a tensor into its guard shows in the results instead of reading as (almost) zero."""
_generations = itertools.count(1)


class GraphAllocator:
    """Places every tensor of a graph in buffers of `backend`'s buffer type (ggml_gallocr).

    reuse=False gives every tensor and temp block its own bytes (a reference to compare reuse against);
    guard_bytes > 0 surrounds every planned tensor and temp block with guard bytes that `check_guards` verifies,
    and fills them all with POISON_BYTE;
    check=True verifies after each planning that no two live blocks overlap.
    """

    def __init__(self, backend, *, reuse: bool = True, guard_bytes: int = 0, check: bool = False):
        self.backend = backend
        self.reuse = reuse
        self.guard_bytes = guard_bytes
        self.check = check
        self.buffers = []
        self.plan: Plan | None = None
        self.n_plans = 0          # how many times a graph was planned (replays do not count)

    def _signature(self, graph) -> tuple:
        owned = tuple(t.view_src is None and (t.buffer is None or t.buffer.usage == COMPUTE)    # as the planner's
                      for t in graph.leafs + graph.nodes)      # (a view of a weight gets the weight's buffer when placed)
        return graph.signature() + (owned,)

    def _plan(self, graph) -> Plan:
        sig = self._signature(graph)
        if self.plan is not None and self.plan.signature == sig:
            return self.plan
        plan = plan_graph(graph, self.backend, sig, reuse=self.reuse, guard_bytes=self.guard_bytes)
        self.n_plans += 1
        if self.check:
            plan.check_overlap()
        self.plan = plan
        self._ensure_buffers(plan.chunk_sizes)
        return plan

    def _ensure_buffers(self, sizes):
        btype = self.backend.buffer_type
        grown = len(sizes) > len(self.buffers) or any(s > b.size for s, b in zip(sizes, self.buffers))
        if not grown:
            return
        self.buffers = []
        for size in sizes:
            buf = btype.alloc_buffer(max(size, btype.alignment))
            buf.usage = COMPUTE
            self.buffers.append(buf)

    def reserve(self, graph) -> Plan:
        """Plan `graph` (the worst case) and allocate buffers for it, without placing its tensors."""
        self.backend.check_supported(graph)
        return self._plan(graph)

    def alloc_graph(self, graph) -> Plan:
        """Place every tensor of `graph`: replay the stored plan when the graph has the same structure and
        shapes, plan again when it changed (buffers grow only when the new plan needs more)."""
        self.backend.check_supported(graph)
        plan = self._plan(graph)
        self._apply(graph, plan)
        return plan

    def _apply(self, graph, plan: Plan):
        tensors = graph.leafs + graph.nodes
        for p, t in enumerate(tensors):
            if p in plan.slots:
                chunk, offset = plan.slots[p]
                t.buffer, t.offset = self.buffers[chunk], offset
            t.released = p in plan.released
        for i, node in enumerate(graph.nodes):
            temp = plan.temps.get(i)
            node.temp = (self.buffers[temp[0]], temp[1], temp[2]) if temp is not None else None
        for t in tensors:
            if t.view_src is not None:
                base = t.view_src
                if base.buffer is None:
                    raise AllocationError(f"view '{t.name}' (op {t.op}) has a source with no memory")
                t.buffer, t.offset = base.buffer, base.offset + t.view_offs
        if plan.guard_bytes:
            for b in plan.blocks:
                if b.inplace_of < 0:
                    self.buffers[b.chunk].fill(b.offset, b.size, POISON_BYTE)
        plan.generation = next(_generations)
        graph.plan = plan

    def check_guards(self, graph):
        """Raise AllocationError naming the tensor or temp block whose guard bytes were overwritten (a kernel
        wrote out of bounds)."""
        plan = graph.plan
        if plan is None or not plan.guard_bytes or self.reuse:
            raise AllocationError("check_guards needs a graph planned by GraphAllocator(backend, reuse=False, "
                                  "guard_bytes=N) with N > 0 (with reuse, later tensors legitimately overwrite "
                                  "earlier tensors' guards)")
        g = plan.guard_bytes
        tensors = graph.leafs + graph.nodes
        fenced = [(chunk, offset, tensors[p].nbytes, f"tensor '{tensors[p].name}' (op {tensors[p].op}, "
                                                     f"ne={tensors[p].ne})") for p, (chunk, offset) in plan.slots.items()]
        fenced += [(chunk, offset, size, f"the temp block of node '{graph.nodes[i].name}' (op {graph.nodes[i].op}, "
                                         f"{size} bytes)") for i, (chunk, offset, size) in plan.temps.items()]
        for chunk, offset, nbytes, what in fenced:
            buf = self.buffers[chunk]
            for start, where in ((offset - g, "before"), (offset + nbytes, "after")):
                if buf.read_bytes(start, g) != bytes([POISON_BYTE]) * g:
                    raise AllocationError(f"guard bytes {where} {what} were overwritten: a kernel wrote out of bounds")
