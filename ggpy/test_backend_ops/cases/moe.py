"""Cases for mul_mat_id: one token (a mat-vec over the selected experts) to a prompt's worth, b broadcast over the
slots (B1 = 1: the gate/up products) or one row a slot (the down product), every weight type, odd M, experts picked
twice by different tokens and never by others, b strided; prompts of 40 and 100 tokens (the grouped
implementations: more than 64 slots on an expert)."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...types import BF16, F16, F32, I32, QUANT_TYPES
from ..harness import OpCase
from .util import layout, leaf

Q8_NMSE = 1e-3
"""A quantized as multiplies b's rows rounded to 8 bits per 32-block (the integer dot products of mul_mat's mat-vec):
nmse ~1e-5, up to ~2e-4 on a small case; a wrong expert or row gives ~1."""
SHAPES = [  # (K, M, n_expert, n_used, n_tokens, b broadcast over the slots)
    (64, 33, 4, 2, 1, True), (64, 33, 4, 2, 1, False), (128, 17, 8, 3, 5, False), (32, 48, 6, 6, 3, True),
    (96, 40, 16, 4, 13, True), (64, 9, 1, 1, 2, False), (64, 70, 5, 3, 40, False), (64, 33, 3, 2, 100, True),
]


def _experts(n_expert: int):
    """A fill giving ids (n_used, n_tokens) distinct experts of [0, n_expert) per token, as a router's top-k does."""
    def fill(rng, t):
        if t.type != I32:
            return None
        used, tokens = t.ne[0], t.ne[1]
        return np.stack([rng.permutation(n_expert)[:used] for _ in range(tokens)]).astype(np.int32)[None, None]
    return fill


def _mul_mat_id(ctx, t, k, m, n_expert, used, tokens, broadcast, how="cont"):
    as_ = leaf(ctx, t, (k, m, n_expert))
    b = layout(ctx, F32, (k, 1 if broadcast else used, tokens), how)
    return ops.mul_mat_id(as_, b, leaf(ctx, I32, (used, tokens)).set_name("ids"))


def _flops(node):
    return 2 * node.src[0].ne[0] * node.nelements


def cases():
    out = []
    for t in (F32, F16, BF16) + tuple(QUANT_TYPES):
        for k, m, n_expert, used, tokens, bc in SHAPES:
            k = k if not t.quantized else k * t.block // 32
            out.append(OpCase("mul_mat_id", f"{t.name},K={k},M={m},experts={n_expert},used={used},tokens={tokens},"
                              f"b_broadcast={bc}", lambda ctx, t=t, k=k, m=m, ne=n_expert, u=used, n=tokens, bc=bc:
                              _mul_mat_id(ctx, t, k, m, ne, u, n, bc), fill=_experts(n_expert), flops=_flops,
                              max_nmse=Q8_NMSE if t.quantized else 5e-7))
    for how in ("padded", "permuted3"):
        out.append(OpCase("mul_mat_id", f"f32,b={how}", lambda ctx, how=how: _mul_mat_id(
            ctx, F32, 64, 20, 5, 3, 4, False, how), fill=_experts(5), max_nmse=5e-7))
    return out
