"""Cases for soft_max / soft_max_ext (F32 and F16 masks with broadcasting and extra rows, scale, ALiBi slopes,
-inf entries and fully masked rows) and diag_mask_inf."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...types import BF16, F16, F32
from ..harness import OpCase
from ..references import evaluate
from .util import LAYOUTS, TYPES, layout, leaf

SHAPES = [(1, 1, 1, 1), (7, 3, 1, 1), (33, 5, 4, 3), (1000, 7, 2, 1), (4097, 17, 1, 1)]
MASKED = [  # (a.ne, mask.ne, scale, max_bias)
    ((16, 5, 4, 3), (16, 5, 1, 1), 0.5, 0.0),
    ((16, 5, 4, 3), (16, 8, 2, 3), 1.0, 0.0),
    ((33, 7, 5, 2), (33, 9, 5, 1), 0.125, 8.0),
    ((33, 7, 5, 2), (33, 7, 1, 1), 1.0, 8.0),
    ((20, 3, 8, 1), (20, 4, 1, 1), 0.3, 8.0),
    ((9, 4, 12, 1), (9, 4, 12, 1), 1.0, 2.5),
    ((1, 1, 1, 1), (1, 1, 1, 1), 2.0, 0.0),
    ((1500, 3, 2, 1), (1500, 3, 1, 1), 0.7, 0.0),
    ((256, 64, 5, 1), (256, 70, 1, 1), 0.125, 8.0),
]
DIAG = [((7, 7, 1, 1), 0), ((10, 6, 3, 2), 3), ((5, 9, 2, 1), 0), ((4, 3, 2, 1), 10), ((33, 17, 1, 1), 16),
        ((300, 300, 1, 1), 10)]


def _scores(rng, t):
    """Scores in [-5, 5); the leaf named 'mask' gets values in [-2, 2) with a third of them -inf."""
    shape = tuple(reversed(t.ne))
    if t.name != "mask":
        return rng.uniform(-5.0, 5.0, size=shape)
    return np.where(rng.random(shape) < 1 / 3, -np.inf, rng.uniform(-2.0, 2.0, size=shape))


def _causal(rng, t):
    """A causal mask (0 at or left of the diagonal, -inf right of it) with every fifth row fully -inf (the
    result of such a row is nan, as the reference's); scores in [-5, 5) for other leafs."""
    shape = tuple(reversed(t.ne))
    if t.name != "mask":
        return rng.uniform(-5.0, 5.0, size=shape)
    i1, i0 = np.indices(shape[2:])
    m = np.where((i0 > i1) | (i1 % 5 == 4), -np.inf, 0.0)
    return np.broadcast_to(m, shape)


def _masked(ctx, ta, tm, ne, mne, scale, max_bias, how="cont"):
    mask = layout(ctx, tm, mne, how)
    (mask.view_src if mask.view_src is not None else mask).set_name("mask")
    return ops.soft_max_ext(layout(ctx, ta, ne), mask, scale, max_bias)


def cases():
    out = []
    for t in TYPES:
        for ne in SHAPES:
            out.append(OpCase("soft_max", f"{t.name},ne={ne}", lambda ctx, t=t, ne=ne: ops.soft_max(
                layout(ctx, t, ne)), fill=_scores))
        for how in LAYOUTS[1:]:
            out.append(OpCase("soft_max", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.soft_max(
                layout(ctx, t, (13, 6, 5, 2), how)), fill=_scores))
        for tm in TYPES:
            for ne, mne, scale, max_bias in MASKED:
                out.append(OpCase("soft_max", f"{t.name},mask={tm.name}{mne},ne={ne},scale={scale},max_bias={max_bias}",
                                  lambda ctx, t=t, tm=tm, ne=ne, mne=mne, s=scale, mb=max_bias: _masked(
                                      ctx, t, tm, ne, mne, s, mb), fill=_scores))
    for how in LAYOUTS[1:]:
        out.append(OpCase("soft_max", f"f32,mask=f16,{how}", lambda ctx, how=how: _masked(
            ctx, F32, F16, (11, 6, 5, 1), (11, 6, 5, 1), 0.5, 4.0, how), fill=_scores))
    for tm in TYPES:
        out.append(OpCase("soft_max", f"f32,mask={tm.name},causal,fully masked rows", lambda ctx, tm=tm: _masked(
            ctx, F32, tm, (10, 10, 3, 1), (10, 12, 1, 1), 1.0, 0.0), fill=_causal))
    for t in TYPES:
        for ne, n_past in DIAG:
            out.append(OpCase("diag_mask_inf", f"{t.name},ne={ne},n_past={n_past}", lambda ctx, t=t, ne=ne, n=n_past:
                              ops.diag_mask_inf(layout(ctx, t, ne), n)))
        for how in LAYOUTS[1:]:
            out.append(OpCase("diag_mask_inf", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.diag_mask_inf(
                layout(ctx, t, (9, 6, 5, 2), how), 2)))
    out.append(OpCase("soft_max", "f32,perf,ne=(4096,4096)", lambda ctx: ops.soft_max(layout(ctx, F32, (4096, 4096))),
                      tags=("perf",)))
    out += attention_cases()
    return out


def _window_attention(ctx, hd, n, heads, nw, scale, mtype, t=F32):
    """S = mul_mat(k, q) -> soft_max_ext(S, mask, scale) -> mul_mat(v^T, P) -> permute -> cont (a cast back to t
    when q, k, v are of half type t): the attention pattern of the fusion pass (one kernel on CUDA).
    q, k, v (HD, N, heads, nW); the result (HD, heads, N, nW)."""
    q, k, v = (leaf(ctx, t, (hd, n, heads, nw)) for _ in range(3))
    mask = leaf(ctx, mtype, (n, n)) if mtype is not None else None
    p = ops.soft_max_ext(ops.mul_mat(k, q), mask, scale)
    o = ops.permute(ops.mul_mat(ops.transpose(v), p), 0, 2, 1, 3)
    return ops.cont(o) if t == F32 else ops.cast(o, t)


def attention_cases():
    out = []
    for hd, n, heads, nw in ((32, 49, 2, 3), (16, 33, 3, 2), (64, 70, 1, 2)):
        for mtype in (None, F32, F16):
            out.append(OpCase("cont", f"fused,attention,HD={hd},N={n},heads={heads},nW={nw},mask={getattr(mtype, 'name', None)}",
                              lambda ctx, hd=hd, n=n, h=heads, nw=nw, m=mtype: _window_attention(
                                  ctx, hd, n, h, nw, hd ** -0.5, m), reference=evaluate, max_nmse=1e-9))
    for t in (F16, BF16):        # tensor cores on CUDA: several key chunks (N = 196), every head size, masks
        for hd, n, heads, nw, mtype in ((32, 49, 2, 3, F32), (32, 196, 2, 2, F16), (16, 33, 3, 2, None),
                                        (64, 70, 1, 2, F32)):
            out.append(OpCase("cast", f"fused,attention,{t.name},HD={hd},N={n},heads={heads},nW={nw},"
                              f"mask={getattr(mtype, 'name', None)}", lambda ctx, t=t, hd=hd, n=n, h=heads, nw=nw,
                              m=mtype: _window_attention(ctx, hd, n, h, nw, hd ** -0.5, m, t),
                              reference=evaluate, max_nmse={F16: 1e-5, BF16: 2e-4}[t]))
    return out
