"""Tensors, contexts and graphs."""
from .graph import Graph
from .tensor import (FLAG_INPUT, FLAG_OUTPUT, FLAG_PARAM, MAX_DIMS, Context, Tensor, contiguous_strides,
                     normalize_ne)

__all__ = ["Graph", "Context", "Tensor", "contiguous_strides", "normalize_ne", "MAX_DIMS",
           "FLAG_INPUT", "FLAG_OUTPUT", "FLAG_PARAM"]
