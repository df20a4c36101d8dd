"""float64 numpy references for every op, one module per op family, written from ggml's documented semantics.

Each takes the node (for its op_params) and its sources as float64 arrays of shape reversed(ne)
(4-d: (ne3, ne2, ne1, ne0)) and returns the expected output in the same 4-d layout.
"""
import importlib

from ...ops.registry import OPS
from .common import REFERENCES

for _family in dict.fromkeys(op.family for op in OPS.values() if not op.view):
    importlib.import_module(f"{__name__}.{_family}")

__all__ = ["REFERENCES"]
