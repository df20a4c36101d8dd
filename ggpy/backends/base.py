"""The backend interface every device implements: buffer type, buffer, and the backend itself."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import UnsupportedOpError
from ..graph.fusion import find_fusions, fusion_stamp
from ..optable import is_view
from .winners import tuned_impl

WEIGHTS, COMPUTE = "weights", "compute"


class BufferType:
    """Where a backend's memory comes from: alignment of every tensor, largest single buffer, host or not."""

    name = "abstract"
    alignment = 64
    max_size = 2 ** 62
    is_host = False

    def alloc_buffer(self, size: int) -> Buffer:
        raise NotImplementedError


class Buffer:
    """A block of backend memory holding tensors at byte offsets. `usage` says whose it is (ggml's buffer
    usage): WEIGHTS (tensors placed by alloc_ctx_tensors, left alone by every plan) or COMPUTE (a graph
    allocator's, re-planned at will)."""

    def __init__(self, buffer_type: BufferType, size: int, usage: str = WEIGHTS):
        self.buffer_type = buffer_type
        self.size = size
        self.usage = usage

    def set_tensor(self, tensor, array: np.ndarray):
        """Write `array` (shape reversed(tensor.ne)) into the tensor's bytes."""
        raise NotImplementedError

    def get_tensor(self, tensor) -> np.ndarray:
        """A host copy of the tensor's values, shape reversed(tensor.ne)."""
        raise NotImplementedError

    def fill(self, offset: int, size: int, byte: int):
        """Set `size` bytes from `offset` to `byte` (used for guard bytes)."""
        raise NotImplementedError

    def read_bytes(self, offset: int, size: int) -> bytes:
        raise NotImplementedError


@dataclass
class Step:
    """One call of a backend's program: computes `node` (and the nodes fused into it) with kernel `name`."""

    node: object
    name: str
    run: Callable

    def __call__(self, *args):
        return self.run(*args)


class Timing(NamedTuple):
    """One row of Backend.profile: a step's node, kernel name and seconds."""

    node: object
    name: str
    seconds: float


class Backend:
    """Runs planned graphs. Subclasses set `kernels` (their table: op -> Kernel) and implement program, compute
    and profile; with autotune, `winners` (winners.Winners), tune_key(node) and measure_impls(entry, node, impls).

    program(graph) is the planned graph's list of steps (each with `node` and `name`, made once per plan);
    profile(graph) runs them once and returns a Timing per step.
    """

    name = "abstract"
    kind = "abstract"           # in messages: CPU, CUDA
    kernels: dict = {}
    force: dict = {}            # {op: implementation (or a tuple: the first that can run a node)} nodes of op run with
    autotune = False            # measure the implementations of a node (winners.tuned_impl)
    fuse = False                # run the fusion pass's patterns its entries declare (Kernel.fuses) as one kernel
    measure_errors: tuple = ()  # exceptions of measure_impls that mean "nothing measured now"

    def __init__(self, buffer_type: BufferType):
        self.buffer_type = buffer_type

    def checked_force(self, force: dict | None) -> dict:
        """`force` ({op: implementation, or a tuple of them in order of preference}) checked against the backend's
        kernel table."""
        for op, wanted in (force or {}).items():
            impls = getattr(self.kernels.get(op), "impls", ())
            for impl in wanted if isinstance(wanted, tuple) else (wanted,):
                if impl not in impls:
                    raise UnsupportedOpError(f"{type(self).__name__}: cannot force {op!r} to run as {impl!r}; its "
                                             f"implementations: {', '.join(impls) or 'none'}")
        return dict(force or {})

    # -- what runs where: lookups in the kernel table --------------------------------------------------------------
    def entry(self, node):
        """The kernel entry that runs `node`, or None (views, no entry, or refused)."""
        entry = self.kernels.get(node.op)
        return entry if entry is not None and entry.refusal(node) is None else None

    def refusal(self, node) -> str | None:
        """Why this backend cannot run `node` (None when it can). View ops never need a kernel."""
        entry = self.kernels.get(node.op)
        if entry is None:
            return None if is_view(node) else f"no {self.kind} kernel for op {node.op}"
        return entry.refusal(node)

    def supports_op(self, node) -> bool:
        return is_view(node) or self.refusal(node) is None

    def impl_for(self, node) -> str | None:
        """The implementation that runs `node`: forced, else measured (autotune), else the entry's choice (None:
        only one)."""
        entry = self.entry(node)
        if entry is None or not entry.impls:
            return None
        if node.op in self.force:
            wanted = self.force[node.op]
            if isinstance(wanted, str):
                return wanted
            return next((impl for impl in wanted if entry.can_run(node, impl, self)), wanted[-1])
        return (tuned_impl(self, entry, node) if self.autotune else None) or entry.choose(node, self)

    def is_tuned(self, node) -> bool:
        """Whether node's kernel was picked by measuring (shown as +tuned)."""
        return self.autotune and self.winners.winner(self.tune_key(node)) is not None

    def temp_size(self, node) -> int:
        """Scratch bytes the kernel chosen for `node` needs while it runs (0 when none)."""
        entry = self.entry(node)
        return 0 if entry is None else entry.scratch(node, self.impl_for(node), self)

    def kernel_name(self, node) -> str:
        """Which implementation runs `node` (shown in plan dumps)."""
        if is_view(node):
            return node.op
        entry = self.entry(node)
        if entry is None:
            return "unsupported"
        name = entry.kernel_name(node, self.impl_for(node))
        return name + "+tuned" if self.is_tuned(node) else name

    # -- fusion: the fusion pass's patterns, run where the entries declare them ------------------------------------
    def fused(self, node, pattern: str):
        """The Fused of `node`'s entry for `pattern` when it runs the pattern anchored at this node, else None."""
        entry = self.entry(node)
        spec = entry.fuses.get(pattern) if entry is not None else None
        return spec if spec is not None and spec.takes(node, self.impl_for(node)) else None

    def fused_kernel(self, fusion):
        """The Fused that runs `fusion` (its anchor's entry's)."""
        return self.entry(fusion.anchor).fuses[fusion.pattern]

    def fusions(self, graph) -> dict:
        """{id(head): fusion} of the patterns this backend runs (none with fuse off), found once per graph version
        and outputs."""
        if not self.fuse:
            return {}
        return self.cached(graph, "fusions", lambda g: find_fusions(g, self.fused), fusion_stamp(graph))

    def fused_groups(self, graph) -> list:
        """The runs of nodes (lists in graph order, views left out) that one fused kernel computes at the first
        node's turn through one block, writing the last one's result: the planner gives each run one block."""
        return [f.nodes for f in self.fusions(graph).values() if len(f.nodes) > 1]

    def fused_early(self, graph) -> dict:
        """{id(head): the nodes a fused kernel writes at its head's turn, before their own} (the planner gives them
        their blocks then)."""
        return {k: f.early for k, f in self.fusions(graph).items() if f.early}

    def fused_runs(self, graph) -> list:
        """Every node each fused kernel computes (views left out), for dumps."""
        return [f.computed for f in self.fusions(graph).values()]

    def cached(self, graph, what: str, make, stamp=()):
        """make(graph), computed once per version of `graph` and `stamp` (what else the value depends on) and kept
        in graph.backend_cache under (self, what): the one key scheme of every per-graph cache (fusions, program,
        captured CUDA graph)."""
        key, now = (self, what), (graph.version, stamp)
        hit = graph.backend_cache.get(key)
        if hit is not None and hit[0] == now:
            return hit[1]
        value = make(graph)
        graph.backend_cache[key] = (now, value)
        return value

    @staticmethod
    def plan_stamp(graph) -> tuple:
        """What a program depends on besides the graph's version: the memory plan applied last."""
        plan = graph.plan
        return (id(plan), plan.generation if plan is not None else None)

    def program(self, graph) -> list:
        raise NotImplementedError

    def stage(self, graph, inputs, outputs):
        """Host memory standing in for a planned graph's `inputs` and `outputs` (tensors) that its evaluations copy
        themselves (CUDA: pinned memory, the copies captured in its CUDA graph): an object with has(t), write(t,
        array) and read(t); None (here) where a GraphRunner writes and reads the tensors directly."""
        return None

    def compute(self, graph):
        raise NotImplementedError

    def compute_async(self, graph):
        """Queue the planned graph's work and return (a backend without a queue, the CPU, runs it now)."""
        self.compute(graph)

    def profile(self, graph) -> list[Timing]:
        raise NotImplementedError

    def synchronize(self):
        pass

    def unsupported(self, node) -> UnsupportedOpError:
        """The error for a node this backend cannot run, with the reason."""
        srcs = ", ".join(f"{s.type.name}{list(s.ne)}" for s in node.src if s is not None)
        reason = self.refusal(node)
        return UnsupportedOpError(f"backend {self.name} cannot run node '{node.name}' op={node.op} "
                                  f"type={node.type.name} ne={node.ne} (sources: {srcs})"
                                  + (f": {reason}" if reason else ""))

    def check_supported(self, graph):
        for node in graph.nodes:
            if not self.supports_op(node):
                raise self.unsupported(node)
