"""Softmax along ne[0] (plain and with mask, scale and ALiBi bias) and causal masking."""
from __future__ import annotations

from ..errors import ShapeError
from ._common import check_float, check_tensor, new_node


def soft_max(a):
    """softmax along ne[0] of each row. ne = a.ne."""
    check_float("soft_max", a)
    return new_node("soft_max", a.type, a.ne, [a], {"scale": 1.0, "max_bias": 0.0})


def soft_max_ext(a, mask=None, scale: float = 1.0, max_bias: float = 0.0):
    """softmax(a * scale + slope * mask) along ne[0].

    mask: F32 or F16 with mask.ne[0] == a.ne[0], mask.ne[1] >= a.ne[1] (row i1 uses mask row i1), and
    broadcast over dims 2 and 3 (a.ne[2] % mask.ne[2] == 0, a.ne[3] % mask.ne[3] == 0).
    slope is 1, or with max_bias > 0 the ALiBi slope of head i2 (dimension 2), as ggml.
    """
    check_float("soft_max_ext", a)
    if mask is not None:
        check_tensor("soft_max_ext", mask, "mask")
        check_float("soft_max_ext", mask, names=("mask",))
        if (mask.ne[0] != a.ne[0] or mask.ne[1] < a.ne[1] or a.ne[2] % mask.ne[2] or a.ne[3] % mask.ne[3]):
            raise ShapeError(f"soft_max_ext: mask ne={mask.ne} does not fit a ne={a.ne}; expected mask.ne[0] == "
                             "a.ne[0], mask.ne[1] >= a.ne[1], and mask.ne[2], mask.ne[3] dividing a.ne[2], a.ne[3]")
    elif max_bias > 0:
        raise ShapeError("soft_max_ext: max_bias > 0 (ALiBi) needs a mask")
    src = [a] if mask is None else [a, mask]
    return new_node("soft_max", a.type, a.ne, src, {"scale": float(scale), "max_bias": float(max_bias)})


def diag_mask_inf(a, n_past: int):
    """Set a[..., i1, i0] = -inf where i0 > n_past + i1 (causal mask). ne = a.ne."""
    check_float("diag_mask_inf", a)
    return new_node("diag_mask_inf", a.type, a.ne, [a], {"n_past": int(n_past)})
