"""Reductions: sum (all elements), sum_rows and mean (along ne[0]).

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits and every
element goes through `load`/`store`. Sums accumulate in float64.
"""
import numpy as np
from numba import prange

from ..registry import BoundNode, register
from .common import block, kernel, launch, parallel_kernel, row_index
from .fp16 import store
from .mathfn import row_sum


@kernel
def sum_part(a, ith, nth):
    """float64 sum of worker ith's block of the rows (along ne[0]) of a."""
    ne3, ne2, ne1, _ = a.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    s = 0.0
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        s += row_sum(a[i3, i2, i1])
    return s


@parallel_kernel
def sum_all_par(d, a, nth):
    """d (ne = (1,)) = sum of all elements of a, over nth workers."""
    parts = np.zeros(nth)
    for ith in prange(nth):
        parts[ith] = sum_part(a, ith, nth)
    d[0, 0, 0, 0] = store(np.float32(parts.sum()), d.dtype)


@kernel
def sum_all(d, a):
    """d (ne = (1,)) = sum of all elements of a."""
    d[0, 0, 0, 0] = store(np.float32(sum_part(a, 0, 1)), d.dtype)


@register("sum")
def bind_sum(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    nth = min(b.threads_for(x.size), x.size // x.shape[-1])
    if nth == 1:
        return lambda: sum_all(d, x)
    return lambda: sum_all_par(d, x, nth)


@kernel
def sum_rows_rows(d, a, div, ith, nth):
    """d (ne = (1, ne1, ne2, ne3)) = sum along ne[0] of a (ne = (ne0, ne1, ne2, ne3)) / div."""
    ne3, ne2, ne1, _ = a.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        d[i3, i2, i1, 0] = store(np.float32(row_sum(a[i3, i2, i1]) / div), dt)


@register("sum_rows", "mean")
def bind_sum_rows(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    args = (d, x, float(x.shape[-1]) if b.node.op == "mean" else 1.0)
    nth = b.threads_for(x.size)
    return launch(sum_rows_rows, args, nth)

