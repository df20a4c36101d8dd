"""Which CUDA kernels run each op: a table the family modules fill with `register` (the CPU's kernel protocol).

An entry's functions take the node (and, for entries with several implementations, the implementation chosen
for it). A node runs as one launch of `kernel_name(node)` on Args packed from the node, its first two sources,
params(node) (floats p0, p1), iparam(node) (Args.iop) and int_params(node) (Args.ip), with launch_config(node)
(default: grid-stride over dst), unless the entry has `steps(backend, node[, impl])`, which returns the node's
steps itself (several launches, cuBLASLt GEMMs). Pure Python: importing it needs no cuda-python.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class CUDAKernel:
    """How the CUDA backend runs some ops. `refusal(node)` says why it cannot run a node (None: it can);
    `source()` is the family's CUDA C (all families compile as one translation unit); `temp_size` the scratch
    bytes a node needs from the planner's temp heap; `impls` alternative implementations, `choose(node)` the
    default one (CUDABackend(force={op: impl}) overrides it), `accepts(node, impl)` whether impl can run node (the
    candidates CUDABackend(autotune=True) times; default: every one)."""

    ops: tuple
    source: Callable
    refusal: Callable
    kernel_name: Callable
    params: Callable = lambda node: ()          # defaults: no float params, iop 0, no int params
    iparam: Callable = lambda node: 0
    int_params: Callable = lambda node: ()
    launch_config: Callable | None = None
    temp_size: Callable | None = None
    steps: Callable | None = None
    impls: tuple = ()
    choose: Callable | None = None
    accepts: Callable | None = None


KERNELS: dict[str, CUDAKernel] = {}


def register(**fields) -> CUDAKernel:
    """Register a CUDAKernel for the ops `fields['ops']`."""
    entry = CUDAKernel(**fields)
    for op in entry.ops:
        KERNELS[op] = entry
    return entry
