"""The scheduling pass: walk the nodes in order, give each tensor an offset by liveness, and reserve each
node's temporary block from the same heap while that node runs.

Rules (as ggml-alloc): leafs and inputs are placed first and never freed; views own no memory and keep
their source alive; a node may take over a source's block in place when its op allows it, the source has
no other consumer and no views, has the same layout, and is neither a leaf, an input nor an output;
outputs are never freed. When the backend computes a run of nodes with one fused kernel at the first
one's turn (backend.fused_groups), the first node's block fits the run's largest node and each later node takes
over its predecessor's block, as in place: the kernel writes the run's result where it was planned while its
sources and scratch were live; the nodes it writes before their own turn (backend.fused_early) get their blocks at
its turn.
"""
from __future__ import annotations

from ..backends.base import COMPUTE
from ..optable import may_run_inplace
from .dynamic import DynamicAllocator, align_up
from .plan import FOREVER, Block, Plan, TimelineRow

def _same_layout(a, b) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def _label(t, pos: int) -> str:
    return f"'{t.name}' ({t.op or 'leaf'} #{pos})" if t.name else f"{t.op or 'leaf'} #{pos}"


def plan_graph(graph, backend, signature, *, reuse: bool = True, guard_bytes: int = 0) -> Plan:
    """Plan `graph`'s memory on `backend`'s buffer type. Tensors that already have a buffer are left alone."""
    btype = backend.buffer_type
    align = btype.alignment
    guard = align_up(guard_bytes, align) if guard_bytes else 0
    heap = DynamicAllocator(align, btype.max_size)
    tensors = graph.leafs + graph.nodes
    pos = {id(t): i for i, t in enumerate(tensors)}
    n_leafs = len(graph.leafs)

    def owned(t) -> bool:
        return t.view_src is None and (t.buffer is None or t.buffer.usage == COMPUTE)

    n_children = {}
    n_views = {}
    keep = set()
    for node in graph.nodes:
        for s in node.src:
            if s is not None:
                n_children[id(s)] = n_children.get(id(s), 0) + 1
        if node.view_src is not None:
            n_views[id(node.view_src)] = n_views.get(id(node.view_src), 0) + 1
            if node.is_output:
                keep.add(id(node.view_src))

    slots, temps, blocks, block_of = {}, {}, [], {}
    fused_after = {}       # id(node of a fused run) -> the node before it in that run
    run_bytes = {}         # id(first node of a fused run) -> the largest node of the run: the run's one block
    for run in (backend.fused_groups(graph) if reuse else []):
        fused_after.update((id(b), a) for a, b in zip(run, run[1:]))
        run_bytes[id(run[0])] = max(n.nbytes for n in run)
    early = backend.fused_early(graph) if reuse else {}
    released = set()
    timeline = []
    live = [0]

    def allocate(t, start, inplace_of=None):
        p = pos[id(t)]
        if inplace_of is not None:
            src_block = block_of[id(inplace_of)]
            b = blocks[src_block]
            b.end = start
            blocks.append(Block(b.chunk, b.offset, b.size, start, FOREVER, _label(t, p), inplace_of=src_block))
            slots[p] = slots[pos[id(inplace_of)]]
            released.add(pos[id(inplace_of)])
        else:
            size = align_up(max(t.nbytes, run_bytes.get(id(t), 1)), align) + 2 * guard
            chunk, offset = heap.alloc(size)
            blocks.append(Block(chunk, offset, size, start, FOREVER, _label(t, p)))
            slots[p] = (chunk, offset + guard)
            live[0] += size
        block_of[id(t)] = len(blocks) - 1

    def release(t, when):
        if not reuse or id(t) in keep or t.is_output or t.is_input or t.op is None or not owned(t):
            return
        bi = block_of.get(id(t))
        if bi is None or blocks[bi].end != FOREVER:
            return
        b = blocks[bi]
        b.end = when
        heap.free(b.chunk, b.offset, b.size)
        live[0] -= b.size
        released.add(pos[id(t)])

    for t in graph.leafs:
        if owned(t):
            allocate(t, -1)
    for i, node in enumerate(graph.nodes):
        t0 = 3 * i
        out_bytes = 0
        took = None
        if owned(node) and id(node) not in block_of:
            prev = fused_after.get(id(node))
            if prev is not None and id(prev) in block_of and blocks[block_of[id(prev)]].end == FOREVER:
                took = prev
            elif reuse and may_run_inplace(node):
                for s in node.src:
                    if (s is not None and owned(s) and s.op is not None and not s.is_output and not s.is_input
                            and id(s) not in keep and n_children.get(id(s), 0) == 1
                            and n_views.get(id(s), 0) == 0 and _same_layout(s, node)
                            and id(s) in block_of and blocks[block_of[id(s)]].end == FOREVER):
                        took = s
                        break
            before = live[0]
            allocate(node, t0, took)
            out_bytes = live[0] - before
        for t in early.get(id(node), ()):
            if owned(t) and id(t) not in block_of:
                before = live[0]
                allocate(t, t0)
                out_bytes += live[0] - before
        temp_size = backend.temp_size(node)
        if temp_size:
            size = align_up(temp_size, align) + 2 * guard
            chunk, offset = heap.alloc(size)
            temps[i] = (chunk, offset + guard, temp_size)
            blocks.append(Block(chunk, offset, size, t0 + 1, t0 + 2 if reuse else FOREVER,
                                f"temp of {_label(node, n_leafs + i)}"))
            live[0] += size
        timeline.append(TimelineRow(i, node.name, node.op, backend.kernel_name(node), out_bytes, temp_size,
                                    live[0], sum(heap.chunk_sizes), took is not None))
        if temp_size and reuse:        # without reuse a temp keeps its bytes (and guards) to the end
            heap.free(chunk, offset, size)
            live[0] -= size
        for s in node.src:
            if s is None:
                continue
            n_children[id(s)] -= 1
            if n_children[id(s)] == 0 and n_views.get(id(s), 0) == 0:
                if s.view_src is not None:
                    base = s.view_src
                    n_views[id(base)] -= 1
                    if n_views[id(base)] == 0 and n_children.get(id(base), 0) == 0:
                        release(base, t0 + 2)
                else:
                    release(s, t0 + 2)

    no_reuse = sum(align_up(max(t.nbytes, 1), align) + 2 * guard for t in tensors if owned(t))
    no_reuse += sum(align_up(size, align) + 2 * guard for _, _, size in temps.values())
    return Plan(signature, slots, temps, released, heap.chunk_sizes, no_reuse, blocks, timeline, guard)
