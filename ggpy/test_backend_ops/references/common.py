"""What every reference module shares: the table of references by op, and ggml's broadcasting."""
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
