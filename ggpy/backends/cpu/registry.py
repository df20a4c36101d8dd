"""Which CPU kernel runs each op: a table filled by the kernel modules with `@register`.

A kernel entry binds a planned node to a zero-argument callable once (views of its memory,
parameters, thread count), so evaluating a graph is a loop of plain calls.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

MIN_ELEMENTS_PER_THREAD = 1 << 15


@dataclass
class BoundNode:
    """What a kernel needs at bind time: numpy views of the output, sources and temp block."""

    node: object
    dst: np.ndarray            # shape reversed(node.ne); F16 as uint16 bits
    srcs: list                 # one array per source (None for a missing optional source)
    temp: np.ndarray | None    # uint8 scratch of temp_size(node) bytes, or None
    n_threads: int             # the backend's thread count
    impl: str | None = None    # which implementation runs the node (ops with several), see CPUKernel
    backend: object = None     # the CPUBackend (its options, e.g. scratch_budget)

    def threads_for(self, work: int, min_per_thread: int = MIN_ELEMENTS_PER_THREAD) -> int:
        """How many workers to split `work` elements over: 1 for small work, as ggml does."""
        return max(1, min(self.n_threads, work // min_per_thread))


@dataclass
class CPUKernel:
    """How the CPU runs some ops. An op with several implementations lists them in `impls`; `choose`
    picks one per node (shape heuristics) unless the backend was told to force one."""

    ops: tuple
    bind: Callable                           # bind(BoundNode) -> callable() (or None: nothing to do)
    temp_size: Callable | None = None        # temp_size(node, impl, backend) -> scratch bytes
    supports: Callable | None = None         # supports(node) -> bool
    name: Callable | None = None             # name(node, impl) -> kernel name for plan dumps
    blas: bool = False                       # calls BLAS from its workers (BLAS must then be single-threaded)
    impls: tuple = ()                        # names of the alternative implementations, if any
    choose: Callable | None = None           # choose(node, backend) -> one of impls


KERNELS: dict[str, CPUKernel] = {}


def register(*ops, temp_size=None, supports=None, name=None, blas=False, impls=(), choose=None):
    """Decorator: `bind(b: BoundNode) -> callable` runs ops `ops` on the CPU."""
    def deco(bind):
        entry = CPUKernel(ops, bind, temp_size, supports, name, blas, tuple(impls), choose)
        for op in ops:
            KERNELS[op] = entry
        return bind
    return deco

