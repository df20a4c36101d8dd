"""Ops that move data: copies, concatenation, padding, tiling, row gathering and scattering."""
from __future__ import annotations

from ..errors import ShapeError, TypeMismatchError
from ..types import F32, FLOAT_TYPES, I32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, type_of
from ._common import (can_repeat, check_float, check_tensor, check_type, new_node, new_view)


def dup(a):
    """A contiguous copy of `a` with the same type and shape."""
    check_tensor("dup", a)
    return new_node("dup", a.type, a.ne, [a])


def cont(a):
    """`a` made contiguous (a copy in ne order). ne = a.ne."""
    check_tensor("cont", a)
    return new_node("cont", a.type, a.ne, [a])


def _cont_nd(a, ne):
    check_tensor("cont", a)
    n = 1
    for x in ne:
        n *= x
    if n != a.nelements:
        raise ShapeError(f"cont: cannot give ne={a.ne} ({a.nelements} elements) the shape {tuple(ne)}")
    return new_node("cont", a.type, tuple(ne), [a])


def cont_1d(a, ne0):
    return _cont_nd(a, (ne0,))


def cont_2d(a, ne0, ne1):
    return _cont_nd(a, (ne0, ne1))


def cont_3d(a, ne0, ne1, ne2):
    return _cont_nd(a, (ne0, ne1, ne2))


def cont_4d(a, ne0, ne1, ne2, ne3):
    return _cont_nd(a, (ne0, ne1, ne2, ne3))


QUANTIZE_TO = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
"""The quantized types cpy and cast write (from F32, each block rounded as ggml's quantize_row_*_ref)."""


def _check_quantize(op: str, a, t, ne):
    if t.quantized and (t not in QUANTIZE_TO or a.type != F32 or ne[0] % t.block):
        raise TypeMismatchError(f"{op}: cannot quantize {a.type.name} a ne={a.ne} into {t.name} ne={tuple(ne)}; "
                                f"expected F32 into {', '.join(q.name for q in QUANTIZE_TO)} with ne[0] a multiple "
                                f"of {t.block}")


def cast(a, type_):
    """`a`'s values converted to the float type `type_` (F32, F16, BF16; rounding to nearest even), contiguous,
    ne = a.ne (ggml_cast). Where a graph changes precision. F32 a may also be quantized (QUANTIZE_TO)."""
    check_float("cast", a)
    t = type_of(type_)
    if t not in FLOAT_TYPES + QUANTIZE_TO:
        raise TypeMismatchError(f"cast: cannot cast {a.type.name} a ne={a.ne} to {t.name}; expected F32, F16 or BF16, "
                                f"or (from F32) {', '.join(q.name for q in QUANTIZE_TO)}")
    _check_quantize("cast", a, t, a.ne)
    return new_node("cast", t, a.ne, [a])


def cpy(a, b):
    """Copy `a`'s elements into `b` (same element count; float types may differ: F32, F16, BF16; F32 a into a
    contiguous b of a type in QUANTIZE_TO quantizes it).

    Elements are taken and written in ne order (i0 fastest). The result is a view of `b`.
    """
    check_tensor("cpy", a)
    check_tensor("cpy", b, "b")
    _check_quantize("cpy", a, b.type, b.ne)
    if b.type.quantized and not b.is_contiguous():
        raise ShapeError(f"cpy: a {b.type.name} destination must be contiguous, got b ne={b.ne} nb={b.nb}")
    if a.nelements != b.nelements:
        raise ShapeError(f"cpy: a ne={a.ne} has {a.nelements} elements but b ne={b.ne} has {b.nelements}")
    if (a.type == I32) != (b.type == I32):
        raise ShapeError(f"cpy: cannot copy {a.type.name} a ne={a.ne} into {b.type.name} b ne={b.ne}; "
                         "expected a float type into a float type, or I32 into I32")
    return new_view("cpy", b, b.ne, b.nb, 0, src=[a, b])


def concat(a, b, dim: int):
    """a and b joined along `dim` (0-3); the other dimensions must match. ne[dim] = a.ne[dim] + b.ne[dim]."""
    check_tensor("concat", a)
    check_tensor("concat", b, "b")
    if a.type != b.type:
        raise ShapeError(f"concat: a is {a.type.name} but b is {b.type.name}; expected the same type")
    if not 0 <= dim < 4:
        raise ShapeError(f"concat: dim must be 0..3, got {dim} (a ne={a.ne}, b ne={b.ne})")
    if any(a.ne[i] != b.ne[i] for i in range(4) if i != dim):
        raise ShapeError(f"concat: a ne={a.ne} and b ne={b.ne} must match in every dimension but {dim}")
    ne = list(a.ne)
    ne[dim] += b.ne[dim]
    return new_node("concat", a.type, ne, [a, b], {"dim": dim})


def pad_ext(a, lp0=0, rp0=0, lp1=0, rp1=0, lp2=0, rp2=0, lp3=0, rp3=0):
    """Zero padding before (lp) and after (rp) each dimension. ne[i] = a.ne[i] + lp_i + rp_i."""
    check_float("pad", a)
    pads = (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3)
    if any(int(p) != p or p < 0 for p in pads):
        raise ShapeError(f"pad: padding must be non-negative ints, got {pads}")
    ne = [a.ne[i] + pads[2 * i] + pads[2 * i + 1] for i in range(4)]
    return new_node("pad", a.type, ne, [a], {"lp": tuple(int(p) for p in pads[0::2]),
                                             "rp": tuple(int(p) for p in pads[1::2])})


def pad(a, p0=0, p1=0, p2=0, p3=0):
    """Zeros appended at the end of each dimension (ggml_pad). ne[i] = a.ne[i] + p_i."""
    return pad_ext(a, 0, p0, 0, p1, 0, p2, 0, p3)


def repeat(a, b):
    """`a` tiled to the shape of `b` (each b.ne[i] must be a multiple of a.ne[i]). ne = b.ne."""
    check_tensor("repeat", a)
    check_tensor("repeat", b, "b")
    if not can_repeat(a, b):
        raise ShapeError(f"repeat: a ne={a.ne} cannot be tiled to b ne={b.ne} (b.ne[i] must be a multiple of a.ne[i])")
    return new_node("repeat", a.type, b.ne, [a])


def get_rows(a, b):
    """Gather rows: a.ne = (K, R, A2, A3), b I32 ne = (n, A2, A3); result[i2, i1, :] = a[i2, b[i2, i1], :].

    Result ne = (K, n, A2, A3), F32 (I32 when a is I32; a quantized a's rows dequantized, as ggml).
    """
    check_tensor("get_rows", a)
    check_tensor("get_rows", b, "b")
    check_type("get_rows", b, (I32,), "b")
    if b.ne[3] != 1 or a.ne[2] != b.ne[1] or a.ne[3] != b.ne[2]:
        raise ShapeError(f"get_rows: b ne={b.ne} does not fit a ne={a.ne}; expected b.ne = (n, a.ne[2], a.ne[3], 1)")
    out_type = I32 if a.type == I32 else F32
    return new_node("get_rows", out_type, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), [a, b])


def set_rows(a, b, c):
    """ggml_set_rows: b's rows written into a at the rows c names; the result is a view of a (all of it) that the
    node writes when it runs, so nodes reading a view of the result run after the write (a KV cache's update).

    a.ne = (K, R, A2, A3) (a float type, or Q8_0: each row quantized as cpy does), b.ne = (K, n, A2, A3) (float
    types; F32 into Q8_0), c I32 ne = (n, C1, C2) with A2 % C1 == 0 and A3 % C2 == 0: a[i3, i2, c[i3 % C2, i2 % C1,
    i1]] = b[i3, i2, i1]. An index outside [0, R) is an error on the CPU (the row is skipped on CUDA).
    """
    check_tensor("set_rows", a, "a")
    if a.type == Q8_0:
        _check_quantize("set_rows", b, Q8_0, a.ne)
    else:
        check_float("set_rows", a, names="a")
    check_float("set_rows", b, names="b")
    check_tensor("set_rows", c, "c")
    check_type("set_rows", c, (I32,), "c")
    if (a.ne[0] != b.ne[0] or a.ne[2:] != b.ne[2:] or c.ne[0] != b.ne[1] or c.ne[3] != 1 or b.ne[2] % c.ne[1]
            or b.ne[3] % c.ne[2]):
        raise ShapeError(f"set_rows: a ne={a.ne}, b ne={b.ne}, c ne={c.ne} do not fit; expected b.ne = (a.ne[0], n, "
                         "a.ne[2], a.ne[3]) and c.ne = (n, C1, C2) with C1, C2 dividing a.ne[2], a.ne[3]")
    return new_view("set_rows", a, a.ne, a.nb, 0, src=[b, c, a])
