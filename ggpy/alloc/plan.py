"""Plan: where every tensor and temporary block of a graph lives, and the report the planner keeps."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import AllocationError

FOREVER = float("inf")


@dataclass
class Block:
    """A planned address range and when it is live: [start, end) in planner time (3 ticks per node)."""

    chunk: int
    offset: int
    size: int           # bytes reserved (aligned, guards included)
    start: float
    end: float
    what: str           # tensor or temp label, for messages
    inplace_of: int = -1  # index of the block this one took over in place (-1: none)


@dataclass
class TimelineRow:
    step: int
    name: str
    op: str
    kernel: str
    out_bytes: int      # bytes this node allocated for its output (0 for views and in-place)
    temp_bytes: int     # scratch reserved while it runs
    live_bytes: int     # bytes in use while it runs (outputs, live intermediates, temp)
    high_water: int     # the heap's size so far
    inplace: bool


@dataclass
class Plan:
    """The placement of one graph: slots by tensor position (leafs then nodes) and temp slots by node."""

    signature: tuple
    slots: dict                 # position -> (chunk, offset) of the tensor's first byte
    temps: dict                 # node index -> (chunk, offset, size)
    released: set               # positions of intermediates whose memory is reused after their last use
    chunk_sizes: list
    no_reuse_bytes: int
    blocks: list = field(default_factory=list)
    timeline: list = field(default_factory=list)
    guard_bytes: int = 0
    generation: int = 0

    @property
    def peak_bytes(self) -> int:
        """Bytes of buffer the graph needs (all chunks)."""
        return sum(self.chunk_sizes)

    def check_overlap(self):
        """Raise AllocationError if two blocks live at the same time share bytes (in-place take-overs aside)."""
        order = sorted(range(len(self.blocks)), key=lambda i: self.blocks[i].start)
        active: list[int] = []
        for i in order:
            b = self.blocks[i]
            active = [j for j in active if self.blocks[j].end > b.start]
            for j in active:
                o = self.blocks[j]
                if o.chunk != b.chunk or b.inplace_of == j or o.inplace_of == i:
                    continue
                if b.offset < o.offset + o.size and o.offset < b.offset + b.size:
                    raise AllocationError(
                        f"plan overlap: {b.what} [{b.offset}, {b.offset + b.size}) and {o.what} "
                        f"[{o.offset}, {o.offset + o.size}) in chunk {b.chunk} are live at the same time")
            active.append(i)

    def report(self) -> str:
        """Peak bytes, the no-reuse sum and the per-node memory timeline, as text."""
        lines = [f"memory plan: peak {_mib(self.peak_bytes)} in {len(self.chunk_sizes)} buffer(s) "
                 f"{[_mib(s) for s in self.chunk_sizes]}; without reuse {_mib(self.no_reuse_bytes)}",
                 f"{'step':>5} {'op':<14} {'kernel':<22} {'out':>10} {'temp':>10} {'live':>10} {'heap':>10}  name"]
        for r in self.timeline:
            lines.append(f"{r.step:>5} {r.op:<14} {r.kernel:<22} {_mib(r.out_bytes):>10} {_mib(r.temp_bytes):>10} "
                         f"{_mib(r.live_bytes):>10} {_mib(r.high_water):>10}  {r.name}{' (in place)' if r.inplace else ''}")
        return "\n".join(lines)


def _mib(n: int) -> str:
    if n < 1 << 20:
        return f"{n / 1024:.1f}K"
    return f"{n / (1 << 20):.2f}M"
