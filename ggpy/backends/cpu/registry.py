"""Which CPU kernel runs each op: a table filled by the kernel modules with `@register`.

A kernel entry binds a planned node to a zero-argument callable once (views of its memory,
parameters, thread count), so evaluating a graph is a loop of plain calls.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernel import Kernel, table_register

MIN_ELEMENTS_PER_THREAD = 1 << 15


@dataclass
class BoundNode:
    """What a kernel needs at bind time: numpy views of the output, sources and temp block."""

    node: object
    dst: np.ndarray            # shape reversed(node.ne); F16 as uint16 bits
    srcs: list                 # one array per source (None for a missing optional source)
    temp: np.ndarray | None    # uint8 scratch of temp_size(node) bytes, or None
    n_threads: int             # the backend's thread count
    impl: str | None = None    # which implementation runs the node (ops with several), see Kernel
    backend: object = None     # the CPUBackend (its options, e.g. scratch_budget)

    def threads_for(self, work: int, min_per_thread: int = MIN_ELEMENTS_PER_THREAD) -> int:
        """How many workers to split `work` elements over: 1 for small work, as ggml does."""
        return max(1, min(self.n_threads, work // min_per_thread))


@dataclass
class CPUKernel(Kernel):
    """How the CPU runs some ops (the shared Kernel, ggpy/backends/kernel.py) with its payload: `bind(BoundNode)` ->
    a callable (or None: nothing to do), `blas`: it calls BLAS from its workers (BLAS must then be
    single-threaded). Its Fused entries run as run(BoundNode of the head with the last node's output, fusion)."""

    bind: Callable | None = None
    blas: bool = False


KERNELS: dict[str, CPUKernel] = {}


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are the same elements in the same order (a row kernel may write one over the other)."""
    return a.ctypes.data == b.ctypes.data and a.shape == b.shape and a.strides == b.strides


def vector(t) -> np.ndarray:
    """A fused kernel's vector operand (bias, weight) as a flat host array."""
    return t.buffer.kernel_view(t).reshape(-1)


def register(*ops, **fields):
    """Decorator: `bind(b: BoundNode) -> callable` runs ops `ops` on the CPU; `fields` the CPUKernel's others."""
    def deco(bind):
        table_register(KERNELS, CPUKernel(ops, bind=bind, **fields))
        return bind
    return deco
