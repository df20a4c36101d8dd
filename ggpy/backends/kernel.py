"""The kernel entry both backends' tables hold: which ops it runs, why it refuses a node, its implementations and the
fused patterns it runs as one kernel. Every function takes the node first and has one signature for every entry
and backend. A backend subclasses it for its payload (the CPU's `bind`, CUDA's C source and launch fields)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import UnsupportedOpError


@dataclass
class Fused:
    """How an entry runs a pattern of ggpy/graph/fusion.py anchored at one of its ops as one kernel (see
    Kernel.fuses). `run` is the backend's payload: CPU run(bound, fusion) -> callable, CUDA run(backend, fusion)
    -> steps; either returns None where the memory the plan gave does not allow it (the nodes then run one by one).
    `rowwise`: the kernel reads each row of its sources before writing that row of its result, which may then lie
    exactly over a source of its layout (the CPU backend's overlap rule)."""

    run: Callable
    takes: Callable = lambda node, impl: True     # whether the anchor node, run by `impl`, takes the pattern
    accepts: Callable = lambda fusion: True       # whether the kernel takes the found pattern's types and layouts
    act: bool = False           # epilogues: the activation after the bias rides along (else it stays a node)
    cast: bool = False          # a cast of the head's F32 result may come before the bias (or end the attention)
    residual: bool = False      # epilogues of a GEMM: a residual add after the bias
    scale: bool = False         # add_rms_norm: the mul by the norm's weight after it rides along
    rowwise: bool = False


@dataclass
class Kernel:
    """How a backend runs `ops`. `refusal(node)`: why it cannot run a node (None: it can). `impls`: alternative
    implementations, `choose(node, backend)` the default one (Backend.impl_for: force, else the autotuned one, else
    choose), `accepts(node, impl, backend)` whether impl can run node (autotune's candidates; default: temp_size
    does not refuse it), `temp_size(node, impl, backend)` scratch bytes, `name(node, impl)` the kernel's name in plan
    dumps (default: impl, else the op). `fuses`: {pattern of ggpy/graph/fusion.py: Fused} the patterns anchored at
    these ops that the entry runs as one kernel; which patterns an op may anchor is the op table's (Op.fuses)."""

    ops: tuple
    refusal: Callable = lambda node: None
    impls: tuple = ()
    choose: Callable | None = None
    accepts: Callable | None = None
    temp_size: Callable | None = None
    name: Callable | None = None
    fuses: dict = field(default_factory=dict)

    def scratch(self, node, impl, backend) -> int:
        return 0 if self.temp_size is None else int(self.temp_size(node, impl, backend))

    def can_run(self, node, impl, backend) -> bool:
        if self.accepts is not None:
            return self.accepts(node, impl, backend)
        try:
            self.scratch(node, impl, backend)
        except UnsupportedOpError:
            return False
        return True

    def candidates(self, node, backend) -> list:
        """The implementations that can run `node` (what autotune times)."""
        return [impl for impl in self.impls if self.can_run(node, impl, backend)]

    def kernel_name(self, node, impl) -> str:
        return self.name(node, impl) if self.name is not None else impl or node.op


def table_register(table: dict, entry: Kernel) -> Kernel:
    """Put `entry` in a backend's table under each of its ops."""
    for op in entry.ops:
        table[op] = entry
    return entry
