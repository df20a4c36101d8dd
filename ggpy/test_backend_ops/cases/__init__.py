"""All op cases, one module per op family."""
from __future__ import annotations

import importlib

FAMILIES = ("elementwise", "matmul", "reduce", "norm", "softmax", "layout", "conv", "conv_dw", "pool")


def all_cases():
    out = []
    for name in FAMILIES:
        out.extend(importlib.import_module(f"{__name__}.{name}").cases())
    return out
