"""CUDABackend: runs planned graphs on one GPU with NVRTC-compiled kernels on one stream."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...errors import AllocationError, UnsupportedOpError
from ..base import Backend
from . import kernels
from .buffer import CUDABuffer, CUDABufferType
from .compiler import Module, compile_cubin
from .device import Event, Stream, get_device
from .driver import check, driver
from .kernels.common import pack_args

BLOCK = 256
MAX_BLOCKS = 1 << 16        # kernels loop over the rest (grid-stride)


@dataclass
class Launch:
    """One kernel launch, its arguments packed once per plan: `params` is the void** kernelParams array."""

    node: object
    name: str
    function: object
    grid: int
    args: object            # the Args struct that params points to (kept alive here)
    params: object

    def __call__(self, stream: Stream):
        check(driver.cuLaunchKernel(self.function, self.grid, 1, 1, BLOCK, 1, 1, 0, stream.handle,
                                    ctypes.addressof(self.params), 0), "cuLaunchKernel")


def _ptr(t) -> int:
    if not isinstance(t.buffer, CUDABuffer):
        raise AllocationError(f"cuda: tensor '{t.name}' (op {t.op}) is not in CUDA memory ({type(t.buffer).__name__}); "
                              "plan the graph with ggpy.GraphAllocator(cuda_backend)")
    return t.buffer.tensor_ptr(t)


class CUDABackend(Backend):
    """Evaluates planned graphs on device `device` ('cuda', 'cuda:N'). compute() returns once the GPU is
    done; compute_async() only queues the kernels on the backend's stream."""

    def __init__(self, device: str = "cuda:0"):
        self.device = get_device(device)
        self.stream = Stream(self.device)
        super().__init__(CUDABufferType(self.device, self.stream))
        self.name = f"cuda:{self.device.index}"
        self._module = None

    @property
    def module(self) -> Module:
        """The kernels' module, compiled (or loaded from the disk cache) at first use."""
        if self._module is None:
            self.device.activate()
            self._module = Module(compile_cubin(kernels.source(), self.device.arch, "ggpy_kernels"))
        return self._module

    # -- what runs where ---------------------------------------------------------------------------
    def supports_op(self, node) -> bool:
        return node.op in kernels.VIEW_OPS or kernels.family(node) is not None

    def kernel_name(self, node) -> str:
        if node.op in kernels.VIEW_OPS:
            return node.op
        fam = kernels.family(node)
        return fam.kernel_name(node) if fam is not None else "unsupported"

    # -- evaluation --------------------------------------------------------------------------------
    def _launch(self, node) -> Launch | None:
        if node.op in kernels.VIEW_OPS:
            return None
        fam = kernels.family(node)
        if fam is None:
            srcs = ", ".join(f"{s.type.name}{list(s.ne)}" for s in node.src if s is not None)
            raise UnsupportedOpError(f"{self.name}: no kernel for node '{node.name}' op={node.op} "
                                     f"type={node.type.name} ne={node.ne} (sources: {srcs})")
        if node.buffer is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no memory; plan the graph with "
                                  "ggpy.GraphAllocator(backend).alloc_graph(graph) before compute")
        if node.nelements == 0:
            return None
        srcs = [(_ptr(s), s) for s in node.src[:2] if s is not None]
        args = pack_args(_ptr(node), node, srcs, fam.params(node))
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        name = fam.kernel_name(node)
        grid = min(MAX_BLOCKS, (node.nelements + BLOCK - 1) // BLOCK)
        return Launch(node, name, self.module.function(name), grid, args, params)

    def program(self, graph) -> list:
        """The graph's launches in order, made once per plan and reused by every compute."""
        plan = getattr(graph, "plan", None)
        key = (id(plan), getattr(plan, "generation", None), graph.version)
        cached = graph.backend_cache.get(self)
        if cached is not None and cached[0] == key:
            return cached[1]
        launches = [run for run in map(self._launch, graph.nodes) if run is not None]
        graph.backend_cache[self] = (key, launches)
        return launches

    def compute_async(self, graph):
        """Queue every node of a planned graph on the stream, in order."""
        self.device.activate()
        for run in self.program(graph):
            run(self.stream)

    def compute(self, graph):
        self.compute_async(graph)
        self.synchronize()

    def profile(self, graph) -> list:
        """Run a planned graph and return [(node, kernel name, seconds of GPU time)] in evaluation order."""
        self.device.activate()
        launches = self.program(graph)
        events = [Event() for _ in range(len(launches) + 1)]
        events[0].record(self.stream)
        for run, end in zip(launches, events[1:]):
            run(self.stream)
            end.record(self.stream)
        self.synchronize()
        return [(run.node, run.name, Event.elapsed(a, b)) for run, a, b in zip(launches, events, events[1:])]

    def synchronize(self):
        self.stream.synchronize()

    def __repr__(self) -> str:
        return f"CUDABackend({self.name!r}, {self.device.name}, {self.device.arch})"

