"""Helpers every op constructor uses: argument checks that raise clear errors, and node creation."""
from __future__ import annotations

from ..errors import ShapeError, TypeMismatchError
from ..graph.tensor import Tensor, normalize_ne
from ..types import FLOAT_TYPES, GGType
from ..optable import OPS


def check_tensor(op: str, t, what: str = "a") -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeMismatchError(f"{op}: argument '{what}' must be a ggpy Tensor, got {type(t).__name__}")
    return t


def check_type(op: str, t: Tensor, allowed, what: str = "a"):
    if t.type not in allowed:
        names = ", ".join(a.name for a in allowed)
        raise TypeMismatchError(f"{op}: '{what}' has type {t.type.name} (ne={t.ne}); expected {names}")


def check_float(op: str, *tensors: Tensor, names="abc"):
    for t, n in zip(tensors, names):
        check_tensor(op, t, n)
        check_type(op, t, FLOAT_TYPES, n)


def can_repeat(small: Tensor, big: Tensor) -> bool:
    """True when `small` tiles `big` (every big.ne[i] is a multiple of small.ne[i]), as ggml_can_repeat."""
    return all(s > 0 and b % s == 0 for s, b in zip(small.ne, big.ne)) or big.nelements == 0


def check_int(op: str, name: str, value, minimum: int, context: str = "") -> int:
    """`value` as an int, or a ShapeError saying the op, the argument, what was given and the minimum."""
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= minimum
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ShapeError(f"{op}: {name} must be an int >= {minimum}, got {value!r}" + (f" ({context})" if context else ""))
    return int(value)


def check_contiguous(op: str, t: Tensor, what: str = "a"):
    if not t.is_contiguous():
        raise ShapeError(f"{op}: '{what}' must be contiguous (ne={t.ne}, nb={t.nb}); use ggpy.cont() first")


def check_quantized(op: str, src):
    """A TypeMismatchError when a source of `op` has a quantized type at a position the op table does not allow."""
    allowed = OPS[op].quantized if op in OPS else ()
    for i, s in enumerate(src):
        if s is not None and s.type.quantized and i not in allowed:
            raise TypeMismatchError(
                f"{op}: source {i} '{s.name}' has the quantized type {s.type.name} (ne={s.ne}); {op} takes it "
                + (f"only as source {', '.join(map(str, allowed))}" if allowed else "in no quantized type")
                + "; quantized tensors go into get_rows (a), mul_mat (a), cpy (as its destination) and views")


def new_node(op: str, type_: GGType, ne, src, params=None) -> Tensor:
    """A new contiguous node tensor made by `op` from `src` (the first source gives the context)."""
    check_quantized(op, src)
    first = next(s for s in src if s is not None)
    t = Tensor(first.ctx, type_, normalize_ne(ne, f"{op}: ne"), op=op, src=src, op_params=params)
    if first.ctx is not None:
        first.ctx.add(t)
    return t


def new_view(op: str, a: Tensor, ne, nb, offset: int, src=None, params=None) -> Tensor:
    """A view of `a`'s bytes (no memory of its own): shape `ne`, byte strides `nb`, `offset` bytes in."""
    check_quantized(op, src if src is not None else [a])
    base = a.view_src if a.view_src is not None else a
    offs = (a.view_offs if a.view_src is not None else 0) + int(offset)
    ne = normalize_ne(ne, f"{op}: ne")
    nb = tuple(int(b) for b in nb)
    if a.type.quantized and (ne[0] % a.type.block or nb[0] != a.type.size):
        raise ShapeError(f"{op}: a view of {a.type.name} a ne={a.ne} must keep whole blocks of {a.type.block} "
                         f"elements in dimension 0 (ne[0] a multiple, nb[0] = {a.type.size}); got ne={ne} nb={nb}")
    t = Tensor(a.ctx, a.type, ne, nb=nb, op=op, src=src if src is not None else [a], op_params=params,
               view_src=base, view_offs=offs)
    if offs < 0 or (t.nelements and offs + t.nbytes > base.nbytes) or any(b < 0 for b in nb):
        raise ShapeError(f"{op}: view ne={ne} nb={nb} at offset {offs} reaches outside its source "
                         f"(ne={base.ne}, {base.nbytes} bytes)")
    if a.ctx is not None:
        a.ctx.add(t)
    return t
