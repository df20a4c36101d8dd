"""The CPU backend: numba kernels split over `n_threads` workers, BLAS for matrix products."""
from __future__ import annotations

import os
import time
from contextlib import nullcontext

import numba
import numpy as np

from ...errors import AllocationError
from ...optable import is_view
from ..base import Backend, Step, Timing
from . import autotune, kernels, precompile  # noqa: F401 - kernels registers every kernel module
from .buffer import HostBufferType
from .kernels.blas import single_threaded_blas
from .registry import KERNELS, BoundNode, same_memory

DEFAULT_SCRATCH_BUDGET = 16 << 20


def _label(op: str, kernel: str) -> str:
    """What a node runs, for compile progress: its kernel name, prefixed by the op when the name lacks it."""
    return kernel if op.replace("_", "") in kernel.replace("_", "") else f"{op} {kernel}"


class CPUBackend(Backend):
    """Evaluates planned graphs on the host. `n_threads` defaults to the number of cores.

    force: {op: implementation} runs every node of `op` with that implementation instead of the one the
    backend would choose (for tests and measurements). scratch_budget: the most temp bytes a kernel that
    can tile its scratch (im2col, GEMM panels) plans for one node; never more than the buffer type's
    max_size, since a node's temp lives in one buffer. fuse: run the patterns of ggpy/graph/fusion.py that the
    kernel entries declare (Kernel.fuses: bias and activation after mul_mat and channels-contiguous conv_2d_dw,
    LayerNorm's affine, add + rms_norm) as one kernel. autotune: time every implementation of a node once per
    shape and run the fastest (autotune.py).
    """

    name = "cpu"
    kind = "CPU"
    kernels = KERNELS
    winners = autotune.WINNERS

    def __init__(self, n_threads: int | None = None, buffer_type: HostBufferType | None = None,
                 force: dict | None = None, scratch_budget: int = DEFAULT_SCRATCH_BUDGET, fuse: bool = True,
                 autotune: bool = False):
        super().__init__(buffer_type or HostBufferType())
        n_threads = os.cpu_count() or 1 if n_threads is None else int(n_threads)
        if n_threads < 1:
            raise ValueError(f"CPUBackend: n_threads must be >= 1, got {n_threads}")
        self.n_threads = n_threads
        self.force = self.checked_force(force)
        self.scratch_budget = min(int(scratch_budget), self.buffer_type.max_size)
        self.fuse = bool(fuse)
        self.autotune = bool(autotune)

    def tune_key(self, node) -> tuple:
        return autotune.shape_key(node, self)

    def measure_impls(self, entry, node, impls) -> list:
        return autotune.measure_impls(entry, node, impls, self)

    # -- evaluation --------------------------------------------------------------------------------
    def _bound_node(self, node, dst_node=None) -> BoundNode:
        """Views of the node's memory (the output's from `dst_node` when a fused kernel writes there)."""
        temp = None
        if node.temp is not None:
            buf, offset, size = node.temp
            temp = buf.data[offset:offset + size]
        dst_node = dst_node or node
        return BoundNode(node, dst_node.buffer.kernel_view(dst_node),
                         [s.buffer.kernel_view(s) if s is not None else None for s in node.src], temp, self.n_threads,
                         self.impl_for(node), self)

    def _bind_fused(self, fusion):
        """The fused kernel of `fusion` (its head's entry's Fused.run), or None when its output overlaps the head's
        sources or scratch (a plan made without this backend's fused_groups); a row kernel may run exactly in a
        source's memory."""
        spec = self.fused_kernel(fusion)
        bound = self._bound_node(fusion.head, fusion.last)
        if any(s is not None and np.may_share_memory(bound.dst, s) and not (spec.rowwise and same_memory(bound.dst, s))
               for s in bound.srcs + [bound.temp]):
            return None
        return spec.run(bound, fusion)

    def _bind(self, node):
        if is_view(node):
            return None
        entry = self.entry(node)
        if entry is None:
            raise self.unsupported(node)
        if node.buffer is None:
            raise AllocationError(f"cpu: node '{node.name}' (op {node.op}) has no memory; plan the graph with "
                                  "ggpy.GraphAllocator(backend).alloc_graph(graph) before compute")
        for s in node.src:
            if s is not None and s.buffer is None:
                raise AllocationError(f"cpu: source '{s.name}' of node '{node.name}' has no memory")
        return entry.bind(self._bound_node(node))

    def program(self, graph) -> list:
        """The bound kernels of `graph` in order as Steps (node, kernel name, call), made once per plan and reused
        on every compute. A fused kernel appears once, under its first node."""
        return self._program(graph)[0]

    def _program(self, graph) -> tuple:
        return self.cached(graph, "program", self._make_program, (self.plan_stamp(graph), self.n_threads))

    def _make_program(self, graph) -> tuple:
        with precompile.collecting() as requests:       # kernels not compiled yet: noted, compiled together
            runs = self._bind_all(graph, requests)
        if requests:
            precompile.compile_all(requests)
            runs = self._bind_all(graph)
        return runs

    def _bind_all(self, graph, requests=None) -> tuple:
        """([Step], whether a kernel calls BLAS) binding every node of a planned graph; `requests` (collecting)
        gets each node's op and kernel name as the label of what it notes."""
        runs, skipped = [], set()
        fusions = self.fusions(graph)
        for node in graph.nodes:
            if id(node) in skipped:
                continue
            fused = fusions.get(id(node))
            if requests is not None:
                requests.label = _label(node.op, self.kernel_name(node))
            run = self._bind_fused(fused) if fused is not None else None
            if run is not None:
                skipped.update(id(n) for n in fused.skipped)
                runs.append(Step(node, fused.name(self.kernel_name(node)), run))
                continue
            run = self._bind(node)
            if run is not None:
                runs.append(Step(node, self.kernel_name(node), run))
        return runs, any(self.entry(step.node).blas for step in runs)

    def _set_threads(self):
        numba.set_num_threads(max(1, min(self.n_threads, numba.config.NUMBA_NUM_THREADS)))

    def compute(self, graph):
        """Run every node of a planned graph, in order."""
        runs, uses_blas = self._program(graph)
        self._set_threads()
        with single_threaded_blas() if uses_blas else nullcontext():
            for step in runs:
                step.run()

    def profile(self, graph) -> list[Timing]:
        """Run a planned graph like compute() and return a Timing (node, kernel name, seconds) per step, in order."""
        runs, uses_blas = self._program(graph)
        self._set_threads()
        times = []
        with single_threaded_blas() if uses_blas else nullcontext():
            for step in runs:
                t0 = time.perf_counter()
                step.run()
                times.append(Timing(step.node, step.name, time.perf_counter() - t0))
        return times

    def synchronize(self):
        pass

    def __repr__(self) -> str:
        return f"CPUBackend(n_threads={self.n_threads})"

