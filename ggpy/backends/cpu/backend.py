"""The CPU backend: numba kernels split over `n_threads` workers, BLAS for matrix products."""
from __future__ import annotations

import os
import time
from contextlib import nullcontext

import numba
import numpy as np

from ...errors import AllocationError
from ...graph.fusion import find_fusions, fusion_stamp
from ...optable import is_view
from ..base import Backend, Step, Timing
from . import autotune, kernels, precompile  # noqa: F401 - kernels registers every kernel module
from .buffer import HostBufferType
from .kernels.blas import single_threaded_blas
from .kernels.conv.depthwise import bind_dw_cwhn_epilogue, fuses_epilogue
from .kernels.matmul import bind_mul_mat_epilogue
from .kernels.norm import bind_norm_affine
from .registry import KERNELS, BoundNode

DEFAULT_SCRATCH_BUDGET = 16 << 20


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a.ctypes.data == b.ctypes.data and a.shape == b.shape and a.strides == b.strides


def _label(op: str, kernel: str) -> str:
    """What a node runs, for compile progress: its kernel name, prefixed by the op when the name lacks it."""
    return kernel if op.replace("_", "") in kernel.replace("_", "") else f"{op} {kernel}"


class CPUBackend(Backend):
    """Evaluates planned graphs on the host. `n_threads` defaults to the number of cores.

    force: {op: implementation} runs every node of `op` with that implementation instead of the one the
    backend would choose (for tests and measurements). scratch_budget: the most temp bytes a kernel that
    can tile its scratch (im2col, GEMM panels) plans for one node; never more than the buffer type's
    max_size, since a node's temp lives in one buffer. fuse: run the epilogue patterns of ggpy/graph/fusion.py
    (bias and activation after mul_mat and channels-contiguous conv_2d_dw, LayerNorm's affine) as one kernel.
    autotune: time every implementation of a node once per shape and run the fastest (autotune.py).
    """

    name = "cpu"

    def __init__(self, n_threads: int | None = None, buffer_type: HostBufferType | None = None,
                 force: dict | None = None, scratch_budget: int = DEFAULT_SCRATCH_BUDGET, fuse: bool = True,
                 autotune: bool = False):
        super().__init__(buffer_type or HostBufferType())
        n_threads = os.cpu_count() or 1 if n_threads is None else int(n_threads)
        if n_threads < 1:
            raise ValueError(f"CPUBackend: n_threads must be >= 1, got {n_threads}")
        self.n_threads = n_threads
        self.force = self.checked_force(force, KERNELS)
        self.scratch_budget = min(int(scratch_budget), self.buffer_type.max_size)
        self.fuse = bool(fuse)
        self.autotune = bool(autotune)

    # -- what runs where ---------------------------------------------------------------------------
    def _kernel(self, node):
        entry = KERNELS.get(node.op)
        if entry is None or (entry.supports is not None and not entry.supports(node)):
            return None
        return entry

    def refusal(self, node) -> str | None:
        if self._kernel(node) is not None:
            return None
        return f"no CPU kernel for op {node.op}" if node.op not in KERNELS else "the kernel does not take these types"

    def impl_for(self, node) -> str | None:
        """The implementation that runs `node`: forced, else measured (autotune), else the kernel's choice
        (None: only one)."""
        entry = self._kernel(node)
        if entry is None or not entry.impls:
            return None
        tuned = autotune.tuned_impl(entry, node, self) if self.autotune and node.op not in self.force else None
        return self.force.get(node.op) or tuned or entry.choose(node, self)

    def temp_size(self, node) -> int:
        entry = self._kernel(node)
        if entry is None or entry.temp_size is None:
            return 0
        return int(entry.temp_size(node, self.impl_for(node), self))

    def kernel_name(self, node) -> str:
        if is_view(node):
            return node.op
        entry = self._kernel(node)
        if entry is None:
            return "unsupported"
        impl = self.impl_for(node)
        name = entry.name(node, impl) if entry.name is not None else impl or node.op
        return name + "+tuned" if self.autotune and autotune.is_tuned(node, self) else name

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

    def fused_groups(self, graph) -> list:
        return [f.nodes for f in self._fusions(graph).values()]

    def _fusions(self, graph) -> dict:
        """{id(head): Epilogue} of the graph (none with fuse=False), found once per graph version and outputs."""
        if not self.fuse:
            return {}
        return self.cached(graph, "fusions", lambda g: find_fusions(g, self._fusable_head), fusion_stamp(graph))

    def _fusable_head(self, node) -> bool:
        if node.op == "conv_2d_dw":
            return fuses_epilogue(node, self.impl_for(node))
        return node.op in ("mul_mat", "norm") and node.type.size == 4 and not node.src[0].type.quantized

    def _bind_fused(self, fused):
        """The fused kernel of an Epilogue, or None when its output overlaps the head's sources or scratch
        (a plan made without this backend's fused_groups). A norm may run in its source's memory."""
        bound = self._bound_node(fused.head, fused.last)
        srcs = bound.srcs[1:] if fused.head.op == "norm" and _same_memory(bound.dst, bound.srcs[0]) else bound.srcs
        if any(s is not None and np.may_share_memory(bound.dst, s) for s in srcs + [bound.temp]):
            return None
        bias = fused.bias.buffer.kernel_view(fused.bias).reshape(-1)
        if fused.head.op == "norm":
            scale = fused.scale.buffer.kernel_view(fused.scale).reshape(-1)
            return bind_norm_affine(bound, scale, bias, fused.act)
        if fused.head.op == "mul_mat":
            bound.dst = bound.dst.reshape(tuple(reversed(fused.head.ne)))
            return bind_mul_mat_epilogue(bound, bias, fused.act)
        n, c, oh, ow = reversed(fused.head.ne)          # channels innermost in the fused output's memory
        bound.dst = bound.dst.reshape(n, oh, ow, c).transpose(0, 3, 1, 2)
        return bind_dw_cwhn_epilogue(bound, bias, fused.act)

    def _bind(self, node):
        if is_view(node):
            return None
        entry = self._kernel(node)
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
        fusions = self._fusions(graph)
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
        return runs, any(self._kernel(step.node).blas for step in runs)

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

