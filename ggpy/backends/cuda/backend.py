"""CUDABackend: runs planned graphs on one GPU with NVRTC-compiled kernels (and cuBLASLt) on one stream.

A planned graph becomes a list of steps, made once per plan: kernel `Launch`es with their arguments packed,
and Python-side callables that a family's `steps(backend, node)` returns (cuBLASLt GEMMs). Each step has
`node` and `name` and is called with the stream.

With graphs=True (the default) the first compute of a plan runs the steps one by one and then captures them
as a CUDA graph (ggpy/backends/cuda/graphs.py); every later compute of the same plan replays that graph
with one cuGraphLaunch. A new plan (or a changed graph) is captured again; when capture fails the steps are
launched one by one, the reason logged once.

Fusion (fuse=True): a mul_mat whose only user is an add of an F32 bias vector over ne[0] (the CPU backend's
find_fusions patterns) runs as one cuBLASLt GEMM with the BIAS epilogue writing the add's memory (and, when
the bias add's only user is an add of a same-shape residual that the plan put in place of the residual and
nothing later reads, that residual as the GEMM's C matrix with beta = 1, D written over it); a norm followed by mul(weight) and add(bias) (LayerNorm's
affine) as one row kernel (norm_affine); a 3x3 CWHN depthwise conv followed by add(bias) and optionally an
activation as one conv_dw3_cwhn kernel; windowed attention (mul_mat(k, q) -> soft_max -> mul_mat(v^T, p) ->
permute -> cont) as one win_attn kernel (kernels/attention.py). fused_groups gives the planner those runs
([mul_mat, add], [norm, mul, add], [conv_2d_dw, add(, act)], [mul_mat, soft_max, mul_mat, cont]) so
each node takes the block of the one before and the fused kernel writes the last one's memory.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...errors import AllocationError, CudaError, UnsupportedOpError
from ...types import F32
from ..base import Backend
from ..cpu.fusion import consumers, find_fusions, fusion_stamp, only_user
from . import kernels
from .buffer import CUDABuffer, CUDABufferType
from .compiler import Module, compile_cubin
from .device import Event, Stream, get_device
from .driver import check, driver
from .graphs import capture
from .kernels.common import elementwise_config, pack_args


def _dim3(v) -> tuple[int, int, int]:
    v = (v,) if isinstance(v, int) else tuple(v)
    return v + (1,) * (3 - len(v))


@dataclass
class Launch:
    """One kernel launch, its arguments packed once per plan: `params` is the void** kernelParams array."""

    node: object
    name: str
    function: object
    grid: tuple             # (x, y, z) blocks
    block: tuple            # (x, y, z) threads
    args: object            # the Args struct that params points to (kept alive here)
    params: object

    def __call__(self, stream: Stream):
        check(driver.cuLaunchKernel(self.function, *self.grid, *self.block, 0, stream.handle,
                                    ctypes.addressof(self.params), 0), f"cuLaunchKernel({self.name})")


def tensor_ptr(t) -> int:
    if not isinstance(t.buffer, CUDABuffer):
        raise AllocationError(f"cuda: tensor '{t.name}' (op {t.op}) is not in CUDA memory ({type(t.buffer).__name__}); "
                              "plan the graph with ggpy.GraphAllocator(cuda_backend)")
    return t.buffer.tensor_ptr(t)


class CUDABackend(Backend):
    """Evaluates planned graphs on device `device` ('cuda', 'cuda:N'). compute() returns once the GPU is
    done; compute_async() only queues the kernels on the backend's stream."""

    def __init__(self, device: str = "cuda:0", allow_tf32: bool = False, graphs: bool = True, fuse: bool = True):
        self.device = get_device(device)
        self.fuse = fuse                    # mul_mat + bias add as one GEMM with cuBLASLt's BIAS epilogue
        self.allow_tf32 = allow_tf32        # F32 GEMMs may round their inputs to TF32
        self.graphs = graphs                # replay each plan as a captured CUDA graph
        self.captures = 0                   # how many CUDA graphs this backend captured (for tests and reports)
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

    def refusal(self, node) -> str | None:
        """Why this backend cannot run `node` (None when it can)."""
        return None if self.supports_op(node) else kernels.refusal(node)

    def kernel_name(self, node) -> str:
        if node.op in kernels.VIEW_OPS:
            return node.op
        fam = kernels.family(node)
        return fam.kernel_name(node) if fam is not None else "unsupported"

    def temp_size(self, node) -> int:
        """Scratch bytes of the node's family (cuBLASLt workspace, operand conversions) from the temp heap."""
        fam = kernels.family(node)
        return fam.temp_size(node) if fam is not None and hasattr(fam, "temp_size") else 0

    # -- fusion ------------------------------------------------------------------------------------
    def _fusions(self, graph) -> dict:
        """{id(head): Epilogue} of the fused runs: mul_mat + bias add (+ a residual add, as cuBLASLt's C matrix)
        as one GEMM with the BIAS epilogue, norm -> mul(weight) -> add(bias) as one row kernel (an activation
        after them stays a node), a 3x3 CWHN conv_2d_dw + bias add (+ activation) as one kernel; found once per
        graph version and outputs."""
        if not self.fuse:
            return {}
        return self.cached(graph, "fusions", self._find_fusions, fusion_stamp(graph))

    def _find_fusions(self, graph) -> dict:
        out = {}

        def fusable(n):
            if n.op == "conv_2d_dw":
                return kernels.family(n) is not None and kernels.conv.dw_fast(n) is not None
            return n.op in ("mul_mat", "norm") and kernels.family(n) is not None
        for f in find_fusions(graph, fusable, residual=True).values():
            if f.head.nelements > 0 and self._fusion_ok(f):
                out[id(f.head)] = f
        users = consumers(graph)
        for key, f in kernels.attention.find(graph, lambda n: only_user(n, users)).items():
            out.setdefault(key, f)
        return out

    @staticmethod
    def _fusion_ok(f) -> bool:
        """Whether the fused kernel of `f` takes its layouts."""
        if f.head.op == "mul_mat":
            return f.add_node.nb == f.head.nb and (f.residual_node is None or f.head.is_contiguous())
        if f.head.op == "norm":
            return f.scale is not None and f.scale.type == F32 and f.scale.nb[0] == 4
        return all(n.is_contiguous() and n.type == F32 for n in f.nodes[1:])      # conv_2d_dw

    @staticmethod
    def _fused_nodes(f) -> list:
        """The nodes one fused kernel computes: a depthwise conv with its bias and activation; a GEMM with its
        bias (an activation after it stays a node: cuBLASLt's GELU is the tanh form); a norm with its affine."""
        if f.head.op == "conv_2d_dw" or isinstance(f, kernels.attention.AttnFusion):
            return f.nodes
        return [n for n in (f.head, f.scale_node, f.add_node) if n is not None]

    @staticmethod
    def _residual_in_place(f, graph, users, position) -> bool:
        """Whether a GEMM may add f's residual as its C matrix and write D over it, at the head's turn: the plan
        put the residual add in place of the residual (C == D; the planner's own in-place rule, so the fused run
        costs no memory), and nothing after the head reads the residual's memory but the residual add."""
        rn, r = f.residual_node, f.residual
        if rn is None or not isinstance(rn.buffer, CUDABuffer) or not isinstance(r.buffer, CUDABuffer):
            return False
        if tensor_ptr(rn) != tensor_ptr(r):
            return False
        base = r.view_src if r.view_src is not None else r
        shared = [base] + [n for n in graph.nodes if n.view_src is base]
        at = position[id(f.head)]
        return all(reader is rn or reader.view_src is base or position[id(reader)] < at
                   for t in shared for reader in users.get(id(t), []))

    def fused_groups(self, graph) -> list:
        fusions = self._fusions(graph)
        return [self._fused_nodes(fusions[id(n)]) for n in graph.nodes if id(n) in fusions]

    def _can_fuse(self, node, f, residual_node=None) -> bool:
        """Whether the fused kernel may write the add's memory (residual_node's, given): everything on this
        GPU, the bias 16-byte aligned, and the add's memory clear of the head's operands and scratch (a plan
        made without fused_groups); a norm may write its source's memory when the layouts match (each row
        read first), a GEMM its residual's (C == D)."""
        if isinstance(f, kernels.attention.AttnFusion):
            return self._can_fuse_attention(f)
        add = residual_node if residual_node is not None else self._fused_nodes(f)[-1]
        extra = [f.bias] + ([f.scale] if f.scale is not None else [])
        tensors = [node, add] + extra + list(node.src[:1 if node.op == "norm" else 2])
        if any(not isinstance(t.buffer, CUDABuffer) for t in tensors):
            return False
        if node.op == "mul_mat" and getattr(node, "temp", None) is None:
            return False
        if tensor_ptr(f.bias) % 16:
            return False

        def extent(t):
            p = tensor_ptr(t)
            return p, p + sum((n - 1) * b for n, b in zip(t.ne, t.nb)) + t.type.size
        lo, hi = extent(add)
        if node.op == "conv_2d_dw":         # taps read neighbours: the result may not overlap any source
            others = [extent(t) for t in extra + list(node.src[:2])]
        elif node.op == "norm":
            x = node.src[0]
            same = tensor_ptr(x) == lo and x.nb == add.nb and x.type == add.type
            others = [extent(t) for t in extra] + ([] if same else [extent(x)])
        else:
            others = [extent(s) for s in node.src[:2]]
            tp = self.temp_ptr(node)
            others.append((tp, tp + self.temp_size(node)))
            r = f.residual if residual_node is not None else None
            if r is not None:           # C: read by the GEMM, clear of D or exactly D (in place)
                if not isinstance(r.buffer, CUDABuffer):
                    return False
                if extent(r) != (lo, hi):
                    others.append(extent(r))
        return all(hi <= a or b <= lo for a, b in others)

    @staticmethod
    def _can_fuse_attention(f) -> bool:
        """win_attn: every operand on this GPU, q, k, v 16-byte aligned, the cont's memory clear of them all."""
        srcs = [t for t in (f.q, f.k, f.v, f.mask) if t is not None]
        if any(not isinstance(t.buffer, CUDABuffer) for t in srcs + [f.cont]):
            return False
        if any(tensor_ptr(t) % 16 for t in (f.q, f.k, f.v, f.cont)):
            return False

        def extent(t):
            p = tensor_ptr(t)
            return p, p + sum((n - 1) * b for n, b in zip(t.ne, t.nb)) + t.type.size
        lo, hi = extent(f.cont)
        return all(hi <= a or b <= lo for a, b in map(extent, srcs))

    # -- evaluation --------------------------------------------------------------------------------
    def launch(self, node, name: str, dst_ptr: int, dst, srcs: list, params: tuple = (), config=None,
               iop: int = 0, ints: tuple = ()) -> Launch:
        """A Launch of kernel `name` on Args packed for `dst` (any object with ne, nb, nelements) at `dst_ptr`
        and (pointer, tensor) `srcs`; config (grid, block) defaults to a grid-stride pass over dst; `iop` the
        kernel's integer parameter, `ints` its integer op parameters (Args.ip)."""
        args = pack_args(dst_ptr, dst, srcs, params, iop, ints)
        grid, block = config if config is not None else elementwise_config(dst)
        return Launch(node, name, self.module.function(name), _dim3(grid), _dim3(block), args,
                      (ctypes.c_void_p * 1)(ctypes.addressof(args)))

    def temp_ptr(self, node) -> int:
        """The device address of the node's temp block (reserved by the planner from temp_size)."""
        temp = getattr(node, "temp", None)
        if temp is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no temp block; plan the graph "
                                  "with ggpy.GraphAllocator(backend)")
        return temp[0].ptr + temp[1]

    def _steps(self, node) -> list:
        if node.op in kernels.VIEW_OPS:
            return []
        fam = kernels.family(node)
        if fam is None:
            srcs = ", ".join(f"{s.type.name}{list(s.ne)}" for s in node.src if s is not None)
            reason = kernels.refusal(node)
            raise UnsupportedOpError(f"{self.name}: no kernel for node '{node.name}' op={node.op} "
                                     f"type={node.type.name} ne={node.ne} (sources: {srcs})"
                                     + (f": {reason}" if reason else ""))
        if node.buffer is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no memory; plan the graph with "
                                  "ggpy.GraphAllocator(backend).alloc_graph(graph) before compute")
        if node.nelements == 0:
            return []
        if hasattr(fam, "steps"):
            return fam.steps(self, node)
        srcs = [(tensor_ptr(s), s) for s in node.src[:2] if s is not None]
        config = fam.launch_config(node) if hasattr(fam, "launch_config") else None
        iop = fam.iparam(node) if hasattr(fam, "iparam") else 0
        ints = fam.int_params(node) if hasattr(fam, "int_params") else ()
        return [self.launch(node, fam.kernel_name(node), tensor_ptr(node), node, srcs, fam.params(node), config, iop,
                            ints)]

    def program(self, graph) -> list:
        """The graph's steps in order, made once per plan and reused by every compute."""
        plan = getattr(graph, "plan", None)
        key = (id(plan), getattr(plan, "generation", None), graph.version)
        cached = graph.backend_cache.get(self)
        if cached is not None and cached[0] == key:
            return cached[1]
        fusions = self._fusions(graph)
        users, position = consumers(graph), {id(n): i for i, n in enumerate(graph.nodes)}
        launches, skipped = [], set()
        for node in graph.nodes:
            if id(node) in skipped:
                continue
            f = fusions.get(id(node))
            res = None
            if getattr(f, "residual_node", None) is not None and self._residual_in_place(f, graph, users, position):
                res = f.residual_node
            if f is not None and node.buffer is not None and self._can_fuse(node, f, res):
                if res is not None:
                    skipped.add(id(res))
                if isinstance(f, kernels.attention.AttnFusion):
                    launches += kernels.attention.steps(self, f)
                elif node.op == "norm":
                    launches += kernels.rows.norm_affine_steps(self, node, f)
                elif node.op == "conv_2d_dw":
                    launches += kernels.conv.dw_steps(self, node, f)
                else:
                    launches += kernels.family(node).steps(self, node, f.add_node, res,
                                                            f.residual if res is not None else None)
                skipped.update(id(n) for n in self._fused_nodes(f)[1:])
                continue
            launches += self._steps(node)
        graph.backend_cache[self] = (key, launches)
        return launches

    def cuda_graph(self, graph):
        """The CapturedGraph of the graph's current plan (None: not captured yet, graphs off, or capture failed)."""
        cached = graph.backend_cache.get((self, "cuda_graph"))
        program = graph.backend_cache.get(self)
        if cached is None or program is None or cached[0] != program[0]:
            return None
        return cached[1]

    def compute_async(self, graph):
        """Queue every node of a planned graph on the stream, in order (a CUDA graph replay when captured)."""
        self.device.activate()
        steps = self.program(graph)
        if not self.graphs:
            for run in steps:
                run(self.stream)
            return
        key = graph.backend_cache[self][0]
        cached = graph.backend_cache.get((self, "cuda_graph"))
        if cached is not None and cached[0] == key:
            if cached[1] is not None:
                cached[1].launch()
                return
            for run in steps:               # capture failed for this plan: plain launches
                run(self.stream)
            return
        for run in steps:                   # first compute of a plan: run (warms up lazy loading), then capture
            run(self.stream)
        captured = capture(steps, self.stream)
        self.captures += captured is not None
        graph.backend_cache[(self, "cuda_graph")] = (key, captured)

    def compute(self, graph):
        self.compute_async(graph)
        self.synchronize()

    def profile(self, graph) -> list:
        """Run a planned graph once and return [(node, kernel name, seconds of GPU time)] per step, in order
        (the GPU is done when it returns)."""
        self.device.activate()
        launches = self.program(graph)
        if self.graphs:
            try:
                return self._profile_captured(launches)
            except CudaError:
                pass                        # event records could not be captured or timed: plain launches
        events = [Event() for _ in range(len(launches) + 1)]
        events[0].record(self.stream)
        for run, end in zip(launches, events[1:]):
            run(self.stream)
            end.record(self.stream)
        self.synchronize()
        return [(run.node, run.name, Event.elapsed(a, b)) for run, a, b in zip(launches, events, events[1:])]

    def _profile_captured(self, launches) -> list:
        """profile() with the steps and external event-record nodes between them replayed as one CUDA graph,
        so the GPU never waits for Python between two events and each time is the kernel's own."""
        events = [Event() for _ in range(len(launches) + 1)]
        external = driver.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL

        def recorder(event):
            return lambda stream: check(driver.cuEventRecordWithFlags(event.handle, stream.handle, external),
                                        "cuEventRecordWithFlags")
        seq = [recorder(events[0])]
        for run, end in zip(launches, events[1:]):
            seq += [run, recorder(end)]
        captured = capture(seq, self.stream)
        if captured is None:
            raise CudaError("profile capture failed")
        captured.launch()
        self.synchronize()
        return [(run.node, run.name, Event.elapsed(a, b)) for run, a, b in zip(launches, events, events[1:])]

    def synchronize(self):
        self.stream.synchronize()

    def check_supported(self, graph):
        for node in graph.nodes:
            reason = self.refusal(node)
            if reason is not None:
                srcs = ", ".join(f"{s.type.name}{list(s.ne)}" for s in node.src if s is not None)
                raise UnsupportedOpError(f"backend {self.name} cannot run node '{node.name}' op={node.op} "
                                         f"type={node.type.name} ne={node.ne} (sources: {srcs}): {reason}")

    def __repr__(self) -> str:
        return f"CUDABackend({self.name!r}, {self.device.name}, {self.device.arch})"

