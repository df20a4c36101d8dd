"""The largest values of each row: argmax (the index of the largest) and top_k (the indices of the k largest, in
descending order): sampling on the device, so that only token ids cross to the host.

Order (every op, every backend): larger values first, equal values by lower index, nan above every number
(argmax: the first nan, as numpy), -0.0 equal to 0.0; argsort ascending: smaller values first, equal values by lower
index, nan last.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..types import I32
from ._common import check_float, check_int, new_node

ORDERS = ("asc", "desc")


def argmax(a):
    """Index of the largest element of each row of a matrix: a.ne = (n, rows), result I32 ne = (rows,)."""
    check_float("argmax", a)
    if a.ne[2] != 1 or a.ne[3] != 1:
        raise ShapeError(f"argmax: 'a' must be a matrix (ne[2] = ne[3] = 1), got ne={a.ne}")
    return new_node("argmax", I32, (a.ne[1],), [a])


def top_k(a, k: int):
    """ggml_top_k: the indices of the k largest elements of each row of a (ne = (n, ne1, ne2, ne3)), largest first
    (equal values by lower index); result I32 ne = (k, ne1, ne2, ne3). The values of a contiguous matrix a (ne = (n,
    rows)) at them: get_rows(reshape_3d(a, 1, n, rows), result), F32 ne = (1, k, rows)."""
    check_float("top_k", a)
    k = check_int("top_k", "k", k, 1, f"a ne={a.ne}")
    if k > a.ne[0]:
        raise ShapeError(f"top_k: k = {k} is larger than the rows of a (ne={a.ne}); expected k <= {a.ne[0]}")
    return new_node("top_k", I32, (k,) + a.ne[1:], [a], {"k": k})


def argsort(a, order: str = "asc"):
    """ggml_argsort: the indices that sort each row of a (ne = (n, ne1, ne2, ne3)) in `order` ("asc": smallest first,
    "desc": largest first; equal values by lower index either way); result I32 of a's ne."""
    check_float("argsort", a)
    if order not in ORDERS:
        raise ValueError(f"argsort: order must be one of {ORDERS}, got {order!r}")
    return new_node("argsort", I32, a.ne, [a], {"desc": int(order == "desc")})
