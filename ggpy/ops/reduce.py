"""Reductions: sum, sum_rows, mean, argmax."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import I32
from ._common import check_float, new_node


def sum(a):  # noqa: A001 - ggml's name
    """Sum of all elements: ne = (1,), a's type."""
    check_float("sum", a)
    return new_node("sum", a.type, (1,), [a])


def sum_rows(a):
    """Sum along ne[0]: ne = (1, a.ne[1], a.ne[2], a.ne[3])."""
    check_float("sum_rows", a)
    return new_node("sum_rows", a.type, (1,) + a.ne[1:], [a])


def mean(a):
    """Mean along ne[0]: ne = (1, a.ne[1], a.ne[2], a.ne[3])."""
    check_float("mean", a)
    return new_node("mean", a.type, (1,) + a.ne[1:], [a])


def argmax(a):
    """Index of the largest element of each row of a matrix: a.ne = (n, rows), result I32 ne = (rows,)."""
    check_float("argmax", a)
    if a.ne[2] != 1 or a.ne[3] != 1:
        raise ShapeError(f"argmax: 'a' must be a matrix (ne[2] = ne[3] = 1), got ne={a.ne}")
    return new_node("argmax", I32, (a.ne[1],), [a])
