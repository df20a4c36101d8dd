"""Reductions: sum, sum_rows, mean."""
from __future__ import annotations

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

