"""Mixture of experts: ggml's mul_mat_id, the products of each token's rows of b with the matrices of the experts
its router selected."""
from __future__ import annotations

from ..errors import ShapeError, TypeMismatchError
from ..types import F32, FLOAT_TYPES, I32
from ._common import check_tensor, check_type, new_node


def mul_mat_id(as_, b, ids):
    """ggml_mul_mat_id: result[t, e] = as_[ids[t, e]] @ b[t, e % B1], every expert slot e of every token t.

    as_.ne = (K, M, n_expert) (the experts' matrices: F32, F16, BF16 or a block-quantized type), b F32 ne = (K, B1,
    n_tokens) with B1 = n_used or 1 (one row of b for every slot), ids I32 ne = (n_used, n_tokens) (experts in [0,
    n_expert)); result F32 ne = (M, n_used, n_tokens).
    """
    check_tensor("mul_mat_id", as_, "as")
    check_tensor("mul_mat_id", b, "b")
    check_tensor("mul_mat_id", ids, "ids")
    if not as_.type.quantized:
        check_type("mul_mat_id", as_, FLOAT_TYPES, "as")
    if b.type != F32:
        raise TypeMismatchError(f"mul_mat_id: b is {b.type.name} (ne={b.ne}); expected f32")
    check_type("mul_mat_id", ids, (I32,), "ids")
    if as_.ne[3] != 1 or b.ne[3] != 1 or ids.ne[2] != 1 or ids.ne[3] != 1:
        raise ShapeError(f"mul_mat_id: as ne={as_.ne}, b ne={b.ne}, ids ne={ids.ne}; expected a 3-d as and b and a "
                         "2-d ids")
    if as_.ne[0] != b.ne[0]:
        raise ShapeError(f"mul_mat_id: as.ne[0]={as_.ne[0]} (as ne={as_.ne}) must equal b.ne[0]={b.ne[0]} "
                         f"(b ne={b.ne})")
    if ids.ne[1] != b.ne[2] or ids.ne[0] % b.ne[1]:
        raise ShapeError(f"mul_mat_id: ids ne={ids.ne} does not fit b ne={b.ne}; expected ids.ne[1] = b.ne[2] (the "
                         "tokens) and ids.ne[0] a multiple of b.ne[1]")
    return new_node("mul_mat_id", F32, (as_.ne[1], ids.ne[0], ids.ne[1]), [as_, b, ids])
