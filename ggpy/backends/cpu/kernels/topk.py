"""argmax and top_k over the rows of a (rows split over the workers), in the order of ggpy/ops/topk.py: larger
values first, equal values by lower index, nan above every number.

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16/BF16 arrive as their bits and every
element goes through `load`. top_k keeps the best k of a row in a heap whose root is the worst kept (a new element
replaces it only when it is better), then empties the heap from the worst into the result's end.
"""
import numpy as np

from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index, scalar
from .fp16 import load


@kernel
def argmax_rows(d, a, ith, nth):
    """d (I32, ne = (rows,)) = index of the largest element of each row of a (ne = (n, rows)): the first of
    equal maxima, or the first nan (as numpy)."""
    rows, n = a.shape[2], a.shape[3]
    r0, r1 = block(rows, ith, nth)
    for r in range(r0, r1):
        row = a[0, 0, r]
        best = np.float32(-np.inf)
        k = 0
        for i0 in range(n):
            v = load(row[i0])
            if v > best or (v != v and best == best):
                best = v
                k = i0
        d[0, 0, 0, r] = k


@register("argmax")
def bind_argmax(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    nth = b.threads_for(x.size)
    return launch(argmax_rows, (d, x), nth)


@scalar
def better(v, i, w, j):
    """Whether value v at index i comes before value w at index j (i != j)."""
    if v != v:
        return w == w or i < j
    if w != w:
        return False
    return v > w or (v == w and i < j)


@scalar
def sift_down(hv, hi, m, at):
    """Restore the heap hv/hi[:m] (the worst at the root) below position `at`."""
    while True:
        worst = at
        for c in (2 * at + 1, 2 * at + 2):
            if c < m and better(hv[worst], hi[worst], hv[c], hi[c]):
                worst = c
        if worst == at:
            return
        hv[at], hv[worst] = hv[worst], hv[at]
        hi[at], hi[worst] = hi[worst], hi[at]
        at = worst


@kernel
def top_k_rows(d, a, ith, nth):
    """d (I32, ne = (k, ne1, ne2, ne3)) = indices of the k largest elements of each row of a, largest first."""
    ne3, ne2, ne1, n = a.shape
    k = d.shape[3]
    hv = np.empty(k, np.float32)
    hi = np.empty(k, np.int64)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        row = a[i3, i2, i1]
        for m in range(k):                                  # the first k, heap ordered
            hv[m] = load(row[m])
            hi[m] = m
        for m in range(k // 2 - 1, -1, -1):
            sift_down(hv, hi, k, m)
        for i0 in range(k, n):
            v = load(row[i0])
            if better(v, i0, hv[0], hi[0]):
                hv[0] = v
                hi[0] = i0
                sift_down(hv, hi, k, 0)
        out = d[i3, i2, i1]
        for m in range(k - 1, -1, -1):                      # the worst kept goes last
            out[m] = hi[0]
            hv[0], hi[0] = hv[m], hi[m]
            sift_down(hv, hi, m, 0)


@register("top_k")
def bind_top_k(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    rows = x.size // max(x.shape[-1], 1)
    nth = min(b.threads_for(x.size), rows)
    return launch(top_k_rows, (d, x), nth)
