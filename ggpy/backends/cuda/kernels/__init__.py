"""The CUDA kernels: one module per op family of the op table (views need none), each registering its CUDAKernel
entries (ggpy/backends/cuda/registry.py), plus attention.py, the kernel of the fusion pass's attention pattern.
Pure Python: importing them needs no cuda-python."""
from __future__ import annotations

import importlib

from ....optable import OPS
from ..registry import KERNELS
from . import attention
from .common import HEADER

FAMILIES = tuple(importlib.import_module(f"{__name__}.{family}")
                 for family in dict.fromkeys(op.family for op in OPS.values() if not op.view))


def source() -> str:
    """All kernels in one translation unit (one NVRTC compile, one cached cubin)."""
    sources = dict.fromkeys(entry.source for entry in KERNELS.values())
    return HEADER + "".join(make() for make in sources) + attention.source()
