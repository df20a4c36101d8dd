"""The CUDA kernels: one module per op family of the op table (views need none), each registering its CUDAKernel
entries (ggpy/backends/cuda/registry.py), plus attention.py, the kernel of the fusion pass's attention pattern. Their
CUDA C is in the .cu files beside them (the headers they share in the .cuh files; ggpy/backends/cuda/sources.py).
Pure Python: importing them needs no cuda-python."""
from __future__ import annotations

import importlib

from ....optable import OPS
from . import attention

FAMILIES = tuple(importlib.import_module(f"{__name__}.{family}")
                 for family in dict.fromkeys(op.family for op in OPS.values() if not op.view))

