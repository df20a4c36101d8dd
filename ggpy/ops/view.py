"""Views and layout changes that move no data: view_1d..4d, reshape, permute, transpose."""
from __future__ import annotations

from ..errors import ShapeError
from ..graph.tensor import contiguous_strides, normalize_ne
from ._common import check_contiguous, check_tensor, new_view


def view_1d(a, ne0: int, offset: int = 0):
    """A 1-d view of `a`: ne = (ne0,), starting `offset` bytes into a."""
    check_tensor("view_1d", a)
    return new_view("view", a, (ne0,), contiguous_strides(a.type, (ne0, 1, 1, 1)), offset)


def view_2d(a, ne0: int, ne1: int, nb1: int, offset: int = 0):
    """A 2-d view: ne = (ne0, ne1), row stride nb1 bytes."""
    check_tensor("view_2d", a)
    nb = (a.type.size, nb1, nb1 * ne1, nb1 * ne1)
    return new_view("view", a, (ne0, ne1), nb, offset)


def view_3d(a, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int = 0):
    """A 3-d view: ne = (ne0, ne1, ne2), strides nb1, nb2 bytes."""
    check_tensor("view_3d", a)
    return new_view("view", a, (ne0, ne1, ne2), (a.type.size, nb1, nb2, nb2 * ne2), offset)


def view_4d(a, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int = 0):
    """A 4-d view: ne = (ne0, ne1, ne2, ne3), strides nb1, nb2, nb3 bytes."""
    check_tensor("view_4d", a)
    return new_view("view", a, (ne0, ne1, ne2, ne3), (a.type.size, nb1, nb2, nb3), offset)


def view_tensor(a):
    """A view of all of `a` with the same shape and strides."""
    check_tensor("view_tensor", a)
    return new_view("view", a, a.ne, a.nb, 0)


def reshape(a, b):
    """`a` (contiguous) seen with the shape of `b`; element counts must match."""
    check_tensor("reshape", a)
    check_tensor("reshape", b, "b")
    return _reshape("reshape", a, b.ne)


def _reshape(op: str, a, ne):
    check_tensor(op, a)
    check_contiguous(op, a)
    ne = normalize_ne(ne, f"{op}: ne")
    if ne[0] * ne[1] * ne[2] * ne[3] != a.nelements:
        raise ShapeError(f"{op}: cannot reshape ne={a.ne} ({a.nelements} elements) to ne={ne} "
                         f"({ne[0] * ne[1] * ne[2] * ne[3]} elements)")
    return new_view("reshape", a, ne, contiguous_strides(a.type, ne), 0)


def reshape_1d(a, ne0: int):
    return _reshape("reshape_1d", a, (ne0,))


def reshape_2d(a, ne0: int, ne1: int):
    return _reshape("reshape_2d", a, (ne0, ne1))


def reshape_3d(a, ne0: int, ne1: int, ne2: int):
    return _reshape("reshape_3d", a, (ne0, ne1, ne2))


def reshape_4d(a, ne0: int, ne1: int, ne2: int, ne3: int):
    return _reshape("reshape_4d", a, (ne0, ne1, ne2, ne3))


def permute(a, axis0: int, axis1: int, axis2: int = 2, axis3: int = 3):
    """ggml_permute: dimension i of `a` becomes dimension `axis_i` of the result (a view)."""
    check_tensor("permute", a)
    axes = (axis0, axis1, axis2, axis3)
    if sorted(axes) != [0, 1, 2, 3]:
        raise ShapeError(f"permute: axes {axes} must be a permutation of (0, 1, 2, 3) (a ne={a.ne})")
    ne = [0] * 4
    nb = [0] * 4
    for i, ax in enumerate(axes):
        ne[ax] = a.ne[i]
        nb[ax] = a.nb[i]
    return new_view("permute", a, tuple(ne), tuple(nb), 0, params={"axes": axes})


def transpose(a):
    """Swap dimensions 0 and 1 (a view): ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])."""
    check_tensor("transpose", a)
    return new_view("transpose", a, (a.ne[1], a.ne[0], a.ne[2], a.ne[3]), (a.nb[1], a.nb[0], a.nb[2], a.nb[3]), 0)
