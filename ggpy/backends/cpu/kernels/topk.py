"""argmax, top_k and argsort over the rows of a (rows split over the workers), in the orders of ggpy/ops/topk.py:
larger values first, equal values by lower index, nan above every number, -0.0 as 0.0 (argsort ascending: the
reverse, but equal values still by lower index).

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16/BF16 arrive as their bits and every
element goes through `load`. Values are compared as integer keys of their float32 bits (`key`), so a block of BLOCK
elements gets its largest key in a loop that vectorises: argmax scans only the first block holding the row's largest
key; top_k keeps the best k in a heap whose root is the worst kept and scans only the blocks whose largest key beats
the root, then empties the heap from the worst into the result's end.
"""
import numpy as np

from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index, scalar
from .fp16 import f32_to_bits, load

BLOCK = 64
I32 = np.int32
LOWEST = I32(-2 ** 31)      # below every key


@scalar
def key(v):
    """An int32 ordered as float32 v in the order above: its bits, the lower 31 flipped for negative values (integer
    order is then float order), -0.0 (which that makes -1) as 0.0, every nan the largest. int32 arithmetic throughout,
    so that a block's maximum vectorises."""
    u = I32(f32_to_bits(v))
    k = I32(u ^ ((u >> I32(31)) & I32(0x7FFFFFFF)))
    if k == I32(-1):
        k = I32(0)
    if (u & I32(0x7FFFFFFF)) > I32(0x7F800000):
        k = I32(0x7FFFFFFF)
    return k


@scalar
def block_max(row, start, end):
    """The largest key of row[start:end]."""
    m = LOWEST
    for i0 in range(start, end):
        m = max(m, key(load(row[i0])))
    return m


@kernel
def argmax_rows(d, a, ith, nth):
    """d (I32, ne = (rows,)) = index of the largest element of each row of a (ne = (n, rows)): the first of
    equal maxima, or the first nan (as numpy)."""
    rows, n = a.shape[2], a.shape[3]
    r0, r1 = block(rows, ith, nth)
    for r in range(r0, r1):
        row = a[0, 0, r]
        best, at = LOWEST, 0
        for b0 in range(0, n, BLOCK):
            m = block_max(row, b0, min(b0 + BLOCK, n))
            if m > best:
                best, at = m, b0
        for i0 in range(at, n):
            if key(load(row[i0])) == best:
                d[0, 0, 0, r] = i0
                break


@register("argmax")
def bind_argmax(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    nth = max(1, min(b.threads_for(x.size), x.shape[2]))
    return launch(argmax_rows, (d, x), nth)


@scalar
def sift_down(hk, hi, m, at):
    """Restore the heap hk/hi[:m] (the worst at the root: the smaller key, of equal keys the larger index) below
    position `at`."""
    while True:
        worst = at
        for c in (2 * at + 1, 2 * at + 2):
            if c < m and (hk[c] < hk[worst] or (hk[c] == hk[worst] and hi[c] > hi[worst])):
                worst = c
        if worst == at:
            return
        hk[at], hk[worst] = hk[worst], hk[at]
        hi[at], hi[worst] = hi[worst], hi[at]
        at = worst


@kernel
def top_k_rows(d, a, ith, nth):
    """d (I32, ne = (k, ne1, ne2, ne3)) = indices of the k largest elements of each row of a, largest first."""
    ne3, ne2, ne1, n = a.shape
    k = d.shape[3]
    hk = np.empty(k, np.int32)
    hi = np.empty(k, np.int64)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        row = a[i3, i2, i1]
        for m in range(k):                                  # the first k, heap ordered
            hk[m] = key(load(row[m]))
            hi[m] = m
        for m in range(k // 2 - 1, -1, -1):
            sift_down(hk, hi, k, m)
        for b0 in range(k, n, BLOCK):                       # a later element replaces the root only with a larger key
            end = min(b0 + BLOCK, n)
            if block_max(row, b0, end) <= hk[0]:
                continue
            for i0 in range(b0, end):
                v = key(load(row[i0]))
                if v > hk[0]:
                    hk[0] = v
                    hi[0] = i0
                    sift_down(hk, hi, k, 0)
        out = d[i3, i2, i1]
        for m in range(k - 1, -1, -1):                      # the worst kept goes last
            out[m] = hi[0]
            hk[0], hi[0] = hk[m], hi[m]
            sift_down(hk, hi, m, 0)


@register("top_k")
def bind_top_k(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    rows = x.size // max(x.shape[-1], 1)
    nth = max(1, min(b.threads_for(x.size), rows))
    return launch(top_k_rows, (d, x), nth)


@kernel
def argsort_rows(d, a, desc, ith, nth):
    """d (I32, a's shape) = the indices sorting each row of a: ascending (nan last) or with desc descending (nan
    first), equal values by lower index (a stable sort of the keys)."""
    ne3, ne2, ne1, n = a.shape
    keys = np.empty(n, np.int64)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        row = a[i3, i2, i1]
        for i0 in range(n):
            k = np.int64(key(load(row[i0])))
            keys[i0] = -k if desc else k
        order = np.argsort(keys, kind="mergesort")
        out = d[i3, i2, i1]
        for i0 in range(n):
            out[i0] = order[i0]


@register("argsort")
def bind_argsort(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    rows = x.size // max(x.shape[-1], 1)
    nth = max(1, min(b.threads_for(x.size), rows))
    return launch(argsort_rows, (d, x, bool(b.node.op_params["desc"])), nth)
