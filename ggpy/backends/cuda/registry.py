"""Which CUDA kernels run each op: a table the family modules fill with `register` (the shared Kernel of
ggpy/backends/kernel.py, with CUDA's payload). Pure Python: importing it needs no cuda-python.

A node runs as one launch of name(node, impl) on Args packed from the node, its first two sources, params(node)
(floats p0, p1), iparam(node) (Args.iop) and int_params(node) (Args.ip), with launch_config(node) (default:
grid-stride over dst), unless the entry has `steps(backend, node, impl)`, which returns the node's steps itself
(several launches, cuBLASLt GEMMs). A Fused entry runs as run(backend, fusion) -> steps, or None where the memory
the plan gave does not allow it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..kernel import Kernel, table_register


@dataclass
class CUDAKernel(Kernel):
    """How the CUDA backend runs some ops: the shared Kernel with the launch fields above. The kernels it names are
    in kernels/*.cu; a plan compiles the files its launches need (sources.py, modules.py)."""

    params: Callable = lambda node: ()          # defaults: no float params, iop 0, no int params
    iparam: Callable = lambda node: 0
    int_params: Callable = lambda node: ()
    launch_config: Callable | None = None
    steps: Callable | None = None


KERNELS: dict[str, CUDAKernel] = {}


def register(**fields) -> CUDAKernel:
    """Register a CUDAKernel for the ops `fields['ops']`."""
    return table_register(KERNELS, CUDAKernel(**fields))
