"""Fused attention with ggml's semantics (ggml_flash_attn_ext)."""
from __future__ import annotations

from ..errors import ShapeError, TypeMismatchError
from ..types import F32, Q8_0
from ._common import check_float, check_tensor, new_node


def flash_attn_ext(q, k, v, mask=None, scale: float = 1.0, max_bias: float = 0.0, logit_softcap: float = 0.0):
    """ggml_flash_attn_ext: softmax(s + slope * mask) v for every query row, s = scale * k.q (with logit_softcap >
    0: softcap * tanh(s / softcap)), slope 1 or ggml's ALiBi slope of the head (max_bias > 0, with a mask).

    q.ne = (D, N, H, S) F32; k.ne = (D, n_kv, Hk, Sk), v.ne = (Dv, n_kv, Hk, Sk) float or Q8_0 (a KV cache), their
    heads broadcast over q's (H % Hk == 0: query head h reads head h / (H / Hk), as mul_mat); mask None or float with
    ne = (n_kv, >= N, M2, M3), M2 | H, M3 | S; the rows of q, k and v contiguous (nb[0] = type size). Result F32, ne = (Dv, H, N, S): heads
    before tokens (ggml's permute(0, 2, 1, 3) of the attention output). A row whose mask is all -inf gives zeros.
    """
    check_float("flash_attn_ext", q, names="q")
    for t, name in ((k, "k"), (v, "v")):
        check_tensor("flash_attn_ext", t, name)
        if t.type != Q8_0:
            check_float("flash_attn_ext", t, names=name)
        elif t.ne[0] % Q8_0.block:
            raise ShapeError(f"flash_attn_ext: {name} of type q8_0 has rows of {t.ne[0]} elements (ne={t.ne}); "
                             f"expected a multiple of {Q8_0.block}")
    if q.type != F32:
        raise TypeMismatchError(f"flash_attn_ext: q has type {q.type.name} (ne={q.ne}); expected f32")
    if k.ne[0] != q.ne[0] or v.ne[1:] != k.ne[1:] or q.ne[2] % k.ne[2] or q.ne[3] % k.ne[3]:
        raise ShapeError(f"flash_attn_ext: q ne={q.ne}, k ne={k.ne}, v ne={v.ne} do not fit; expected k.ne[0] == "
                         "q.ne[0], v.ne[1:] == k.ne[1:], and k's dims 2, 3 dividing q's")
    if any(t.nb[0] != t.type.size for t in (q, k, v)):
        raise ShapeError(f"flash_attn_ext: the rows of q, k and v must be contiguous (nb[0] = type size, as ggml); got "
                         f"nb {q.nb}, {k.nb}, {v.nb}")
    if mask is not None:
        check_tensor("flash_attn_ext", mask, "mask")
        check_float("flash_attn_ext", mask, names=("mask",))
        if mask.ne[0] != k.ne[1] or mask.ne[1] < q.ne[1] or q.ne[2] % mask.ne[2] or q.ne[3] % mask.ne[3]:
            raise ShapeError(f"flash_attn_ext: mask ne={mask.ne} does not fit q ne={q.ne}, k ne={k.ne}; expected "
                             "(n_kv, >= N, M2, M3) with M2, M3 dividing q.ne[2], q.ne[3]")
    elif max_bias > 0:
        raise ShapeError("flash_attn_ext: max_bias > 0 (ALiBi) needs a mask")
    if logit_softcap < 0:
        raise ShapeError(f"flash_attn_ext: logit_softcap must be >= 0, got {logit_softcap}")
    src = [q, k, v] if mask is None else [q, k, v, mask]
    params = {"scale": float(scale), "max_bias": float(max_bias), "logit_softcap": float(logit_softcap)}
    return new_node("flash_attn_ext", F32, (v.ne[0], q.ne[2], q.ne[1], q.ne[3]), src, params)
