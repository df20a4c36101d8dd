"""Matrix multiplication with ggml's semantics."""
from __future__ import annotations

from ..errors import ShapeError, TypeMismatchError
from ..types import F32
from ._common import check_float, check_tensor, new_node


def mul_mat(a, b):
    """ggml_mul_mat: result[i3, i2] = b[i3, i2] @ a[i3 / r3, i2 / r2]^T.

    a.ne = (K, M, A2, A3), b.ne = (K, N, B2, B3) with B2 % A2 == 0 and B3 % A3 == 0 (a is broadcast);
    result F32, ne = (M, N, B2, B3): each output row n holds the dot products of b's row n with a's rows.
    A block-quantized a (the weight: Q4_0 ... Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS) takes an F32 b.
    """
    if check_tensor("mul_mat", a).type.quantized:
        check_tensor("mul_mat", b, "b")
        if b.type != F32:
            raise TypeMismatchError(f"mul_mat: a is {a.type.name} (ne={a.ne}), b is {b.type.name} (ne={b.ne}); a "
                                    "quantized a takes an F32 b")
    else:
        check_float("mul_mat", a, b)
    if a.ne[0] != b.ne[0]:
        raise ShapeError(f"mul_mat: a.ne[0]={a.ne[0]} (a ne={a.ne}) must equal b.ne[0]={b.ne[0]} (b ne={b.ne})")
    if b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
        raise ShapeError(f"mul_mat: a ne={a.ne} cannot be broadcast over b ne={b.ne}; expected b.ne[2] % a.ne[2] "
                         "== 0 and b.ne[3] % a.ne[3] == 0")
    return new_node("mul_mat", F32, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), [a, b])
