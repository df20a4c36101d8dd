"""Normalisation: norm (LayerNorm without affine), rms_norm, group_norm."""
from __future__ import annotations

from ..errors import ShapeError
from ._common import check_float, new_node


def _check_eps(op: str, eps: float) -> float:
    if not eps >= 0:
        raise ShapeError(f"{op}: eps must be >= 0, got {eps}")
    return float(eps)


def norm(a, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) along ne[0] of each row. ne = a.ne."""
    check_float("norm", a)
    return new_node("norm", a.type, a.ne, [a], {"eps": _check_eps("norm", eps)})


def rms_norm(a, eps: float = 1e-6):
    """x / sqrt(mean(x^2) + eps) along ne[0] of each row. ne = a.ne."""
    check_float("rms_norm", a)
    return new_node("rms_norm", a.type, a.ne, [a], {"eps": _check_eps("rms_norm", eps)})


def group_norm(a, n_groups: int, eps: float = 1e-6):
    """Normalise groups of channels: a.ne = (W, H, C, N); channels are split into `n_groups` groups of
    ceil(C / n_groups) (the last may be smaller), each normalised over (W, H, its channels)."""
    check_float("group_norm", a)
    if not isinstance(n_groups, int) or n_groups < 1:
        raise ShapeError(f"group_norm: n_groups must be a positive int, got {n_groups!r}")
    return new_node("group_norm", a.type, a.ne, [a], {"n_groups": n_groups, "eps": _check_eps("group_norm", eps)})
