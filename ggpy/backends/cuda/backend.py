"""CUDABackend: runs planned graphs on one GPU with NVRTC-compiled kernels (and cuBLASLt) on one stream.

A planned graph becomes a list of steps, made once per plan: kernel `Launch`es with their arguments packed, and
Python-side callables that a kernel entry's `steps` returns (cuBLASLt GEMMs). Each step has `node` and `name`
and is called with the stream. Which kernels run an op is the registry's (registry.py, filled by kernels/).

The kernels are CUDA C in kernels/*.cu, a file per op family (big families split in a few), compiled by NVRTC for
the device's architecture (compiler.py) when a plan first needs them: once a plan's steps are made, the files its
launches name (and the plan's generated chain kernels) compile together in parallel (modules.py), with a progress
line on stderr; the cubins are cached on disk, so a later process compiles nothing.

With graphs=True (the default) the first compute of a plan runs the steps one by one and then captures them
as a CUDA graph (graphs.py); every later compute of the same plan replays that graph with one cuGraphLaunch.
A new plan (or a changed graph) is captured again; when capture fails the steps are launched one by one, the
reason logged once.

Fusion (fuse=True) runs the patterns of ggpy/graph/fusion.py that the kernel entries declare (Kernel.fuses), each
as one kernel: mul_mat + bias add as one cuBLASLt GEMM with the BIAS epilogue writing the add's memory (an activation
after it stays a node: cuBLASLt's GELU is the tanh form), and, when the bias add's only user is an add of a
same-shape residual that the plan put in place of the residual and nothing later reads, that residual as the GEMM's C
matrix with beta = 1 (kernels/matmul.py); windowed attention as win_attn (kernels/attention.py); LayerNorm (norm ->
mul(weight) -> add(bias), and an activation after it) as one row kernel, and add + rms_norm as another
(kernels/norm.py); a 3x3 CWHN depthwise conv or a shallow conv_2d with its bias add and activation (kernels/conv.py);
elementwise chains as generated kernels (kernels/generated.py). fused_groups gives the planner the runs whose nodes
share one block, so each node takes the block of the one before and the fused kernel writes the last one's.
"""
from __future__ import annotations

import ctypes

import dataclasses

from ...errors import AllocationError, CudaError
from ...graph.fusion import Chain, consumers
from ...optable import is_view
from ..base import Backend, Timing
from . import autotune
from .buffer import CUDABuffer, CUDABufferType
from .device import Event, Stream, get_device
from .driver import check, driver
from .graphs import capture
from .staging import Staging, stageable
from .kernels import generated, handoff
from .kernels.common import elementwise_config, pack_args, tensor_ptr
from .launch import Launch, dim3
from .modules import Modules
from .registry import KERNELS
from .sources import Source, chain_program


class CUDABackend(Backend):
    """Evaluates planned graphs on device `device` ('cuda', 'cuda:N'). compute() returns once the GPU is
    done; compute_async() only queues the kernels on the backend's stream.

    force: {op: implementation} runs every node of `op` with that implementation (e.g. {"conv_2d": "im2col"});
    allow_tf32: F32 GEMMs may round their inputs to TF32; graphs: replay each plan as a captured CUDA graph;
    fuse: run the fusion pass's patterns as one kernel each; autotune: time the implementations of a node and
    the cuBLASLt algorithms of a GEMM once per shape and run the fastest (autotune.py; forced ones are not timed);
    pdl: on sm_90 and later, launch every kernel as a programmatic dependent launch (it starts while the kernel before
    it runs and waits in grid_dependency() for that one's end: a launch's latency hidden behind the previous kernel).
    """

    kind = "CUDA"
    kernels = KERNELS
    winners = autotune.WINNERS
    measure_errors = autotune.MEASURE_ERRORS

    def __init__(self, device: str = "cuda:0", allow_tf32: bool = False, graphs: bool = True, fuse: bool = True,
                 force: dict | None = None, autotune: bool = False, pdl: bool = True):
        self.force = self.checked_force(force)
        self.autotune = bool(autotune)
        self.device = get_device(device)
        self.fuse = fuse
        self.allow_tf32 = allow_tf32        # F32 GEMMs may round their inputs to TF32
        self.graphs = graphs                # replay each plan as a captured CUDA graph
        self.captures = 0                   # how many CUDA graphs this backend captured (for tests and reports)
        self.stream = Stream(self.device)
        super().__init__(CUDABufferType(self.device, self.stream))
        self.name = f"cuda:{self.device.index}"
        # programmatic dependent launch (sm_90 on): a kernel launches while the one before it runs (launch.py)
        self.pdl = bool(pdl) and self.device.cc >= (9, 0)
        self.q8_handoffs = set()            # attention outputs written as their mat-vec's q8_1 (kernels/handoff.py)
        self.fa_counters = None             # flash attention's arrival counters, zeroed once (kernels/attention_flash.py)
        self.modules = Modules(self.device)     # the compiled kernel files, loaded when a plan first needs them

    # -- what runs where ---------------------------------------------------------------------------
    def tune_key(self, node) -> tuple:
        return autotune.shape_key(node, self)

    def measure_impls(self, entry, node, impls) -> list:
        return autotune.measure_impls(entry, node, impls, self)

    def is_tuned(self, node) -> bool:
        """Measured: the node's implementation, or the cuBLASLt algorithm of the GEMMs it runs (autotune on)."""
        return super().is_tuned(node) or (self.autotune and self.impl_for(node) == "cublaslt")

    def tuned_gemm(self, desc: int, layouts: tuple, pref: int, algo_ptr: int) -> bool:
        """Whether the measured cuBLASLt algorithm of a GEMM was written at algo_ptr (autotune on and one usable)."""
        return self.autotune and autotune.gemm_algo(self, desc, layouts, pref, algo_ptr)

    def on_device(self, *tensors) -> bool:
        """Whether every tensor is in this backend's memory (a fused kernel's check)."""
        return all(isinstance(t.buffer, CUDABuffer) for t in tensors)

    # -- fusion ------------------------------------------------------------------------------------
    @staticmethod
    def _residual_in_place(f, graph, users, position) -> bool:
        """Whether a GEMM may add f's residual as its C matrix and write D over it, at the head's turn: the plan
        put the residual add in place of the residual (C == D; the planner's own in-place rule, so the fused run
        costs no memory), and nothing after the head reads the residual's memory but the residual add."""
        rn, r = f.residual_node, f.residual
        if not isinstance(rn.buffer, CUDABuffer) or not isinstance(r.buffer, CUDABuffer):
            return False
        if tensor_ptr(rn) != tensor_ptr(r):
            return False
        base = r.view_src if r.view_src is not None else r
        shared = [base] + [n for n in graph.nodes if n.view_src is base]
        at = position[id(f.head)]
        return all(reader is rn or reader.view_src is base or position[id(reader)] < at
                   for t in shared for reader in users.get(id(t), []))

    # -- evaluation --------------------------------------------------------------------------------
    def launch(self, node, name: str, dst_ptr: int, dst, srcs: list, params: tuple = (), config=None,
               iop: int = 0, ints: tuple = ()) -> Launch:
        """A Launch of kernel `name` on Args packed for `dst` (any object with ne, nb, nelements) at `dst_ptr`
        and (pointer, tensor) `srcs`; config (grid, block) defaults to a grid-stride pass over dst; `iop` the
        kernel's integer parameter, `ints` its integer op parameters (Args.ip)."""
        args = pack_args(dst_ptr, dst, srcs, params, iop, ints)
        grid, block = config if config is not None else elementwise_config(dst)
        return self.launch_struct(node, name, grid, block, args)

    def launch_struct(self, node, name: str, grid, block, args, module: Source | None = None) -> Launch:
        """A Launch of kernel `name` (of the Source `module`, default the .cu file that defines it) taking one argument
        struct `args` (a ctypes Structure) by value; its function is bound when its module is loaded (modules.py)."""
        launch = Launch(node, name, None, dim3(grid), dim3(block), args, (ctypes.c_void_p * 1)(ctypes.addressof(args)),
                        pdl=self.pdl)
        self.modules.bind(launch, module)
        return launch

    def generated_module(self, chains) -> tuple[Source, dict]:
        """(the Source of the chains' generated kernels, {id(chain head): kernel name}): one NVRTC program for all of
        them, compiled with the plan's other kernels (not at all when the disk cache has it)."""
        names, sources = {}, {}
        for f in chains:
            name, src = generated.source(f)
            names[id(f.head)], sources[name] = name, src
        return chain_program(sources.values()), names

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
        entry = self.entry(node)
        if entry is None:
            raise self.unsupported(node)
        if node.buffer is None:
            raise AllocationError(f"cuda: node '{node.name}' (op {node.op}) has no memory; plan the graph with "
                                  "ggpy.GraphAllocator(backend).alloc_graph(graph) before compute")
        if node.nelements == 0:
            return []
        impl = self.impl_for(node)
        return entry.steps(self, node, impl) if entry.steps is not None else [self.launch_node(node, impl)]

    def launch_node(self, node, impl=None) -> Launch:
        """The node's one kernel launch as its entry describes it (kernel name, params, launch config, iop, ip) on
        its first two sources: the default step, and a family's when it needs no other."""
        entry = KERNELS[node.op]
        srcs = [(tensor_ptr(s), s) for s in node.src[:2] if s is not None]
        config = entry.launch_config(node) if entry.launch_config is not None else None
        return self.launch(node, entry.kernel_name(node, impl), tensor_ptr(node), node, srcs, entry.params(node),
                           config, entry.iparam(node), entry.int_params(node))

    def program(self, graph) -> list:
        """The graph's steps in order, made once per plan and reused by every compute; the kernel files they launch
        compile together once they are made (modules.Modules.batch)."""
        return self.cached(graph, "program", self._compiled_program, self.plan_stamp(graph))

    def _compiled_program(self, graph) -> list:
        with self.modules.batch():
            return self._make_program(graph)

    def _make_program(self, graph) -> list:
        fusions = self.fusions(graph)
        chains = [f for f in fusions.values() if isinstance(f, Chain)]
        self._chains = self.generated_module(chains) if chains else (None, {})
        users, position = consumers(graph), {id(n): i for i, n in enumerate(graph.nodes)}
        self.q8_handoffs = handoff.find(self, graph, users) if self.fuse else set()
        launches, skipped = [], set()
        for node in graph.nodes:
            if id(node) in skipped:
                continue
            f = fusions.get(id(node))
            if getattr(f, "residual_node", None) is not None and not self._residual_in_place(f, graph, users, position):
                f = dataclasses.replace(f, residual_node=None, residual_views=())
            ok = f is not None and node.buffer is not None and all(id(t) in skipped for t in f.needs)
            fused = self.fused_kernel(f).run(self, f) if ok else None     # needs: nodes an earlier fused kernel wrote
            if fused is not None:
                launches += fused
                skipped.update(id(n) for n in f.skipped)
                continue
            launches += self._steps(node)
        return launches

    def chain_kernel(self, chain) -> tuple:
        """(module, kernel name) of a chain's generated kernel in the program being made."""
        module, names = self._chains
        return module, names[id(chain.head)]

    def cuda_graph(self, graph):
        """The CapturedGraph of the graph's current plan (None: not captured yet, graphs off, or capture failed)."""
        hit = graph.backend_cache.get((self, "cuda_graph"))
        staging = self._staging(graph)
        return hit[1] if hit is not None and hit[0] == (graph.version, self.plan_stamp(graph), id(staging)) else None

    STAGE_LIMIT = 1 << 20       # outputs staged in pinned memory at most this large (the rest are read directly)
    STAGE_INPUT_LIMIT = 1 << 28     # inputs likewise (images of a batch); above STAGE_LIMIT copied only when written

    def stage(self, graph, inputs, outputs) -> Staging:
        """Pinned host mirrors of a planned graph's `inputs` of at most STAGE_INPUT_LIMIT bytes and of its `outputs` of
        at most STAGE_LIMIT (staging.py), copied in and out by every later compute of this plan as steps of its CUDA
        graph; inputs over STAGE_LIMIT are copied before the replay instead, and only when written since the last."""
        def make(g):
            return Staging(self.device, [t for t in inputs if stageable(t, self.STAGE_INPUT_LIMIT)],
                           [t for t in outputs if stageable(t, self.STAGE_LIMIT)], self.STAGE_LIMIT)
        return self.cached(graph, "staging", make, self.plan_stamp(graph))

    def _staging(self, graph) -> Staging | None:
        hit = graph.backend_cache.get((self, "staging"))
        return hit[1] if hit is not None and hit[0] == (graph.version, self.plan_stamp(graph)) else None

    def compute_async(self, graph):
        """Queue every node of a planned graph on the stream, in order (a CUDA graph replay when captured), between
        the copies of its staged inputs and outputs (when a GraphRunner staged them)."""
        self.device.activate()
        staging = self._staging(graph)
        if staging is not None:
            staging.refresh(self.stream)        # the big inputs written since the last compute
        key, now = (self, "cuda_graph"), (graph.version, self.plan_stamp(graph), id(staging))
        hit = graph.backend_cache.get(key) if self.graphs else None
        if hit is not None and hit[0] == now and hit[1] is not None:
            hit[1].launch()
            return
        steps = self.program(graph)
        if staging is not None:
            steps = staging.uploads + steps + staging.downloads
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
        launches, staging = self.program(graph), self._staging(graph)
        if staging is not None:
            staging.refresh(self.stream)
            for run in staging.uploads:
                run(self.stream)
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

