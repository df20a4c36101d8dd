"""CUDABackend: runs planned graphs on one GPU with NVRTC-compiled kernels (and cuBLASLt) on one stream.

A planned graph becomes a list of steps, made once per plan: kernel `Launch`es with their arguments packed, and
Python-side callables that a kernel entry's `steps` returns (cuBLASLt GEMMs). Each step has `node` and `name`
and is called with the stream. Which kernels run an op is the registry's (registry.py, filled by kernels/).

With graphs=True (the default) the first compute of a plan runs the steps one by one and then captures them
as a CUDA graph (graphs.py); every later compute of the same plan replays that graph with one cuGraphLaunch.
A new plan (or a changed graph) is captured again; when capture fails the steps are launched one by one, the
reason logged once.

Fusion (fuse=True) runs these patterns of ggpy/graph/fusion.py as one kernel each: mul_mat + bias add as one
cuBLASLt GEMM with the BIAS epilogue writing the add's memory (an activation after it stays a node: cuBLASLt's
GELU is the tanh form), and, when the bias add's only user is an add of a same-shape residual that the plan put
in place of the residual and nothing later reads, that residual as the GEMM's C matrix with beta = 1; LayerNorm
(norm -> mul(weight) -> add(bias), and an activation after it) as one row kernel (norm_affine); a 3x3 CWHN depthwise conv with its bias add
and activation (conv_dw3_cwhn); windowed attention as win_attn (kernels/attention.py). fused_groups gives the
planner those runs so each node takes the block of the one before and the fused kernel writes the last one's.
"""
from __future__ import annotations

import ctypes

from ...errors import AllocationError, CudaError
from ...graph.fusion import Attention, Chain, consumers, find_fusions, fusion_stamp
from ...optable import is_view
from ..base import Backend, Timing
from . import autotune, kernels
from .buffer import CUDABuffer, CUDABufferType
from .compiler import Module, compile_cubin
from .device import Event, Stream, get_device
from .driver import check, driver
from .graphs import capture
from .kernels import HEADER, attention, conv, generated, norm, quant
from .kernels.common import elementwise_config, extent, pack_args, tensor_ptr
from .kernels.matmul import gemm_type
from .launch import Launch, dim3
from .registry import KERNELS


class CUDABackend(Backend):
    """Evaluates planned graphs on device `device` ('cuda', 'cuda:N'). compute() returns once the GPU is
    done; compute_async() only queues the kernels on the backend's stream.

    force: {op: implementation} runs every node of `op` with that implementation (e.g. {"conv_2d": "im2col"});
    allow_tf32: F32 GEMMs may round their inputs to TF32; graphs: replay each plan as a captured CUDA graph;
    fuse: run the fusion pass's patterns as one kernel each; autotune: time the implementations of a node and
    the cuBLASLt algorithms of a GEMM once per shape and run the fastest (autotune.py; forced ones are not timed).
    """

    def __init__(self, device: str = "cuda:0", allow_tf32: bool = False, graphs: bool = True, fuse: bool = True,
                 force: dict | None = None, autotune: bool = False):
        self.force = self.checked_force(force, KERNELS)
        self.autotune = bool(autotune)
        self.device = get_device(device)
        self.fuse = fuse
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
    def refusal(self, node) -> str | None:
        """Why this backend cannot run `node` (None when it can)."""
        entry = KERNELS.get(node.op)
        if entry is None:
            return None if is_view(node) else f"no CUDA kernel for op {node.op}"
        return entry.refusal(node)

    def _entry(self, node):
        """The kernel entry that runs `node`, or None (views and refused nodes)."""
        entry = KERNELS.get(node.op)
        return entry if entry is not None and entry.refusal(node) is None else None

    def impl_for(self, node) -> str | None:
        """The implementation that runs `node`: forced, else measured (autotune), else the entry's choice (None:
        only one)."""
        entry = self._entry(node)
        if entry is None or not entry.impls:
            return None
        tuned = autotune.tuned_impl(entry, node, self) if self.autotune and node.op not in self.force else None
        return self.force.get(node.op) or tuned or entry.choose(node)

    def tuned_gemm(self, desc: int, layouts: tuple, pref: int, algo_ptr: int) -> bool:
        """Whether the measured cuBLASLt algorithm of a GEMM was written at algo_ptr (autotune on and one usable)."""
        return self.autotune and autotune.gemm_algo(self, desc, layouts, pref, algo_ptr)

    def kernel_name(self, node) -> str:
        if is_view(node):
            return node.op
        entry = self._entry(node)
        if entry is None:
            return "unsupported"
        name = entry.kernel_name(node)
        return name + "+tuned" if self.autotune and autotune.is_tuned(node, self) else name

    def temp_size(self, node) -> int:
        """Scratch bytes of the node's kernel (cuBLASLt workspace, operand conversions) from the temp heap."""
        entry = self._entry(node)
        if entry is None or entry.temp_size is None:
            return 0
        return entry.temp_size(node, self.impl_for(node)) if entry.impls else entry.temp_size(node)

    # -- fusion ------------------------------------------------------------------------------------
    def _fusions(self, graph) -> dict:
        """{id(head): Epilogue or Attention} of the fused runs this backend takes, found once per graph version
        and outputs."""
        if not self.fuse:
            return {}
        return self.cached(graph, "fusions", self._find_fusions, fusion_stamp(graph))

    def _find_fusions(self, graph) -> dict:
        def head_ok(n):
            if n.op == "conv_2d_dw":
                return self._entry(n) is not None and conv.dw_fast(n) is not None
            if n.op == "conv_2d":
                return self._entry(n) is not None and self.impl_for(n) == "direct"
            return self._entry(n) is not None
        return find_fusions(graph, head_ok, act_ok=lambda head: head.op in ("conv_2d_dw", "conv_2d", "norm"), residual=True,
                            attention=True, cast=True, chain=lambda n: self.refusal(n) is None,
                            accepts=self._accepts)

    def _accepts(self, f) -> bool:
        """Whether the fused kernel of `f` takes its types and layouts."""
        if isinstance(f, Attention):
            return self._entry(f.head) is not None and attention.accepts(f)
        if isinstance(f, Chain):
            return generated.refusal(f) is None
        if f.head.nelements == 0:
            return False
        out = f.add_node.type           # D's type: F32, or a fused cast's (the operands' type in the GEMM)
        if f.head.op == "mul_mat":
            if quant.uses_mmv(f.head):
                return False
            if f.cast_node is not None and gemm_type(f.head) != out:
                return False
            return f.add_node.ne == f.head.ne and f.add_node.is_contiguous() and f.head.is_contiguous()
        if f.head.op == "norm":
            return f.scale is not None and f.scale.type == out and f.bias.type == out
        return all(n.is_contiguous() and n.type == out for n in f.nodes[1:])      # conv_2d_dw, conv_2d

    @staticmethod
    def _fused_nodes(f) -> list:
        """The nodes the planner gives one block: the pattern's, without a GEMM's residual add (added only
        when the plan put it in place, see _residual_in_place)."""
        return [n for n in f.nodes if n is not getattr(f, "residual_node", None)]

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
        if isinstance(f, Attention):
            return self._can_fuse_attention(f)
        if isinstance(f, Chain):
            return self._can_fuse_chain(f)
        add = residual_node if residual_node is not None else self._fused_nodes(f)[-1]
        extra = [f.bias] + ([f.scale] if f.scale is not None else [])
        tensors = [node, add] + extra + list(node.src[:1 if node.op == "norm" else 2])
        if any(not isinstance(t.buffer, CUDABuffer) for t in tensors):
            return False
        if node.op == "mul_mat" and getattr(node, "temp", None) is None:
            return False
        if tensor_ptr(f.bias) % 16:
            return False
        lo, hi = extent(add)
        if node.op in ("conv_2d_dw", "conv_2d"):     # taps read neighbours: the result may not overlap any source
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
    def _can_fuse_chain(f) -> bool:
        """A generated kernel: every operand on this GPU; the result's memory clear of the operands, or exactly
        one read at the same index (in place)."""
        srcs = generated.operands(f)
        if any(not isinstance(t.buffer, CUDABuffer) for t in srcs + [f.last]):
            return False
        lo, hi = extent(f.last)
        return all(hi <= a or b <= lo or ((a, b) == (lo, hi) and t.ne == f.last.ne and t.is_contiguous()
                                          and t.type == f.last.type) for t in srcs for a, b in [extent(t)])

    @staticmethod
    def _can_fuse_attention(f) -> bool:
        """win_attn: every operand on this GPU, q, k, v 16-byte aligned, the cont's memory clear of them all."""
        srcs = [t for t in (f.q, f.k, f.v, f.mask) if t is not None]
        if any(not isinstance(t.buffer, CUDABuffer) for t in srcs + [f.cont]):
            return False
        if any(tensor_ptr(t) % 16 for t in (f.q, f.k, f.v, f.cont)):
            return False
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
        return self.launch_struct(node, name, grid, block, args)

    def launch_struct(self, node, name: str, grid, block, args, module=None) -> Launch:
        """A Launch of kernel `name` (of `module`, default the hand-written kernels') taking one argument struct
        `args` (a ctypes Structure) by value."""
        fn = (module or self.module).function(name)
        return Launch(node, name, fn, dim3(grid), dim3(block), args, (ctypes.c_void_p * 1)(ctypes.addressof(args)))

    def generated_module(self, chains) -> tuple[Module, dict]:
        """(the module of the chains' generated kernels, {id(chain head): kernel name}): one NVRTC compile of all
        of them (none when the disk cache has that source)."""
        names, sources = {}, {}
        for f in chains:
            name, src = generated.source(f)
            names[id(f.head)], sources[name] = name, src
        text = HEADER + generated.STRUCT + "".join(sources.values())
        return Module(compile_cubin(text, self.device.arch, "ggpy_generated")), names

    def temp_ptr(self, node) -> int:
        """The device address of the node's temp block (reserved by the planner from temp_size)."""
        temp = getattr(node, "temp", None)
        if temp is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no temp block; plan the graph "
                                  "with ggpy.GraphAllocator(backend)")
        return temp[0].ptr + temp[1]

    def _steps(self, node) -> list:
        if is_view(node):
            return []
        entry = self._entry(node)
        if entry is None:
            raise self.unsupported(node)
        if node.buffer is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no memory; plan the graph with "
                                  "ggpy.GraphAllocator(backend).alloc_graph(graph) before compute")
        if node.nelements == 0:
            return []
        if entry.steps is not None:
            return entry.steps(self, node, self.impl_for(node)) if entry.impls else entry.steps(self, node)
        return [self.launch_node(node)]

    def launch_node(self, node) -> Launch:
        """The node's one kernel launch as its entry describes it (kernel name, params, launch config, iop, ip) on
        its first two sources: the default step, and a family's when it needs no other."""
        entry = KERNELS[node.op]
        srcs = [(tensor_ptr(s), s) for s in node.src[:2] if s is not None]
        config = entry.launch_config(node) if entry.launch_config is not None else None
        return self.launch(node, entry.kernel_name(node), tensor_ptr(node), node, srcs, entry.params(node), config,
                           entry.iparam(node), entry.int_params(node))

    def program(self, graph) -> list:
        """The graph's steps in order, made once per plan and reused by every compute."""
        return self.cached(graph, "program", self._make_program, self.plan_stamp(graph))

    def _make_program(self, graph) -> list:
        fusions = self._fusions(graph)
        chains = [f for f in fusions.values() if isinstance(f, Chain)]
        module, names = self.generated_module(chains) if chains else (None, {})
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
                launches += self._fused_steps(node, f, res, names, module)
                skipped.update(id(n) for n in self._fused_nodes(f)[1:] + [res] if n is not None)
                continue
            launches += self._steps(node)
        return launches

    def _fused_steps(self, node, f, res, names: dict, module) -> list:
        """The launches of a fused run headed by `node` (res: the residual add a GEMM computes in place)."""
        if isinstance(f, Attention):
            return attention.steps(self, f)
        if isinstance(f, Chain):
            launch = self.launch_struct(node, names[id(node)], *generated.launch_config(f), generated.args(f, tensor_ptr),
                                        module)
            launch.name = f.name()
            return [launch]
        if node.op == "norm":
            return norm.norm_affine_steps(self, node, f)
        if node.op == "conv_2d_dw":
            return conv.dw_steps(self, node, f)
        if node.op == "conv_2d":
            return conv.direct_steps(self, node, f)
        return KERNELS["mul_mat"].steps(self, node, f.add_node, res, f.residual if res is not None else None)

    def cuda_graph(self, graph):
        """The CapturedGraph of the graph's current plan (None: not captured yet, graphs off, or capture failed)."""
        hit = graph.backend_cache.get((self, "cuda_graph"))
        return hit[1] if hit is not None and hit[0] == (graph.version, self.plan_stamp(graph)) else None

    def compute_async(self, graph):
        """Queue every node of a planned graph on the stream, in order (a CUDA graph replay when captured)."""
        self.device.activate()
        steps = self.program(graph)
        key, now = (self, "cuda_graph"), (graph.version, self.plan_stamp(graph))
        hit = graph.backend_cache.get(key) if self.graphs else None
        if hit is not None and hit[0] == now and hit[1] is not None:
            hit[1].launch()
            return
        for run in steps:       # graphs off, capture failed for this plan, or its first compute (warms lazy loading)
            run(self.stream)
        if self.graphs and (hit is None or hit[0] != now):
            captured = capture(steps, self.stream)
            self.captures += captured is not None
            graph.backend_cache[key] = (now, captured)

    def compute(self, graph):
        self.compute_async(graph)
        self.synchronize()

    def profile(self, graph) -> list[Timing]:
        """Run a planned graph once and return a Timing (node, kernel name, seconds of GPU time) per step, in
        order (the GPU is done when it returns)."""
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
        return [Timing(run.node, run.name, Event.elapsed(a, b)) for run, a, b in zip(launches, events, events[1:])]

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
        return [Timing(run.node, run.name, Event.elapsed(a, b)) for run, a, b in zip(launches, events, events[1:])]

    def synchronize(self):
        self.stream.synchronize()

    def __repr__(self) -> str:
        return f"CUDABackend({self.name!r}, {self.device.name}, {self.device.arch})"

