"""ggpy: a ggml-style static computation graph runtime in Python.

Build a graph with op constructors (shapes in ggml `ne` order), then run it with a GraphRunner: planned once, named
inputs set, evaluated on a backend (or split across several by a Scheduler), named outputs read.
"""
from .alloc import GraphAllocator, Plan, alloc_ctx_tensors
from .backends.cpu import CPUBackend
from .errors import (AllocationError, CudaError, GGPYError, ModelFileError, OptionError, OutOfMemoryError,
                     RowIndexError, ShapeError, TensorNameError, TypeMismatchError, UnsupportedOpError)
from .graph import Context, Graph, Tensor
from .model_file import ModelFile, load_gguf
from .ops import *  # noqa: F401,F403 - every op constructor at top level, as ggml_* functions
from .ops import __all__ as _ops_all
from .runner import GraphRunner
from .sched import Scheduler
from .types import BF16, F16, F32, I32, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, GGType

__version__ = "0.1.0"

__all__ = ["Context", "Graph", "Tensor", "GraphAllocator", "Plan", "alloc_ctx_tensors", "CPUBackend", "Scheduler",
           "GraphRunner",
           "ModelFile", "load_gguf", "F32", "F16", "BF16", "I32", "GGType",
           "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS",
           "GGPYError", "ShapeError", "TypeMismatchError", "UnsupportedOpError", "OutOfMemoryError",
           "AllocationError", "ModelFileError", "CudaError", "RowIndexError", "OptionError", "TensorNameError"] + list(_ops_all)
