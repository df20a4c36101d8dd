"""What every reference module shares: the table of references by op, ggml's broadcasting, and ggml's block
formats through the gguf package's own code (gguf.quants), never ggpy's."""
from __future__ import annotations

import numpy as np

REFERENCES = {}
"""op name -> reference(node, sources): sources float64 arrays of shape reversed(ne) (4-d: (ne3, ne2, ne1, ne0));
returns the expected output in the same 4-d layout."""


def reference(*ops):
    def deco(fn):
        for op in ops:
            REFERENCES[op] = fn
        return fn
    return deco


def tile(b: np.ndarray, shape) -> np.ndarray:
    """b repeated to `shape` (ggml broadcasting: each dimension of b divides the target's)."""
    return np.tile(b, tuple(s // t for s, t in zip(shape, b.shape)))


def dequantized(raw: np.ndarray, type_) -> np.ndarray:
    """float64 values of a quantized type's blocks (uint8, rows of bytes), shape (..., ne0), by gguf.quants."""
    import gguf

    return gguf.quants.dequantize(np.ascontiguousarray(raw), gguf.GGMLQuantizationType(type_.ggml_id)).astype(np.float64)


def quantized_roundtrip(values: np.ndarray, type_) -> np.ndarray:
    """values (..., ne0) rounded to float32, quantized to type_ and dequantized, by gguf.quants (bit for bit ggml's
    quantize_row_*_ref)."""
    import gguf

    q = gguf.quants.quantize(np.asarray(values, np.float32), gguf.GGMLQuantizationType(type_.ggml_id))
    return dequantized(q, type_)
