"""The CUDA kernels: one module per op family, each giving its CUDA C `source()`, and per node
`supports`, `kernel_name` (the extern "C" function) and `params` (the floats packed into Args).
Pure Python: importing them needs no cuda-python."""
from __future__ import annotations

from . import conv, copies, elementwise, pool
from .common import HEADER

FAMILIES = (elementwise, copies, conv, pool)
VIEW_OPS = ("view", "reshape", "permute", "transpose")
FAMILY_OF = {op: fam for fam in FAMILIES for op in fam.OPS}


def source() -> str:
    """All kernels in one translation unit (one NVRTC compile, one cached cubin)."""
    return HEADER + "".join(f.source() for f in FAMILIES)


def family(node):
    """The kernel family that runs `node`, or None (views need none; unsupported nodes have none)."""
    fam = FAMILY_OF.get(node.op)
    return fam if fam is not None and fam.supports(node) else None
