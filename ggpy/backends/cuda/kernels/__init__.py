"""The CUDA kernels: one module per op family. A family module has OPS, its CUDA C `source()`, and per node
`supports`, `kernel_name` (the extern "C" function) and `params` (the floats packed into Args). Optional:
`launch_config(node) -> (grid, block)` (default: grid-stride over dst), `temp_size(node)` (scratch bytes),
`refusal(node)` (why a node is not supported), `iparam(node)` (the integer parameter Args.iop, e.g. 32-bit
indexing), and `steps(backend, node)` (Python-side steps that run the node instead of one kernel, e.g.
cuBLASLt). Pure Python: importing them needs no cuda-python."""
from __future__ import annotations

from . import attention, conv, copies, elementwise, extra, layout, matmul, pool, rows
from .common import HEADER

FAMILIES = (elementwise, copies, rows, layout, matmul, conv, pool, extra)
VIEW_OPS = ("view", "reshape", "permute", "transpose")
FAMILY_OF = {op: fam for fam in FAMILIES for op in fam.OPS}


def source() -> str:
    """All kernels in one translation unit (one NVRTC compile, one cached cubin)."""
    return HEADER + "".join(f.source() for f in FAMILIES) + attention.source()


def family(node):
    """The kernel family that runs `node`, or None (views need none; unsupported nodes have none)."""
    fam = FAMILY_OF.get(node.op)
    return fam if fam is not None and fam.supports(node) else None


def refusal(node) -> str:
    """Why no family runs `node`."""
    fam = FAMILY_OF.get(node.op)
    if fam is None:
        return f"no CUDA kernel for op {node.op}"
    reason = fam.refusal(node) if hasattr(fam, "refusal") else None
    return reason or f"the {node.op} kernels do not take these types or shapes"
