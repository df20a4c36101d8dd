"""Cases for norm, rms_norm and group_norm: odd and long rows, eps variants, F16, non-contiguous inputs,
group_norm with channels not divisible by the number of groups."""
from __future__ import annotations

from ... import ops
from ...types import BF16, F16, F32
from ..harness import OpCase
from ..references import evaluate
from .util import LAYOUTS, TYPES, layout, leaf, uniform

SHAPES = [(1, 1, 1, 1), (7, 3, 1, 1), (33, 5, 4, 3), (1000, 7, 2, 1), (65536, 2, 1, 1)]
EPS = (1e-5, 1e-6, 0.1)
GROUP_SHAPES = [  # (W, H, C, N), n_groups
    ((8, 6, 10, 2), 4),       # groups of 3: 3, 3, 3, 1 channels
    ((5, 3, 9, 1), 4),        # groups of 3: only 3 groups
    ((7, 7, 6, 1), 1),
    ((3, 2, 5, 3), 5),
    ((1, 1, 7, 2), 3),
    ((16, 16, 32, 2), 32),
    ((64, 64, 6, 1), 2),
    ((64, 64, 10, 2), 4),
]


def cases():
    out = []
    for name in ("norm", "rms_norm"):
        f = getattr(ops, name)
        for t in TYPES:
            for ne in SHAPES:
                out.append(OpCase(name, f"{t.name},ne={ne}", lambda ctx, f=f, t=t, ne=ne: f(layout(ctx, t, ne))))
            for how in LAYOUTS[1:]:
                out.append(OpCase(name, f"{t.name},{how}", lambda ctx, f=f, t=t, how=how: f(
                    layout(ctx, t, (13, 6, 5, 2), how))))
        for eps in EPS:
            out.append(OpCase(name, f"f32,ne=(64,9,2,1),eps={eps}", lambda ctx, f=f, eps=eps: f(
                layout(ctx, F32, (64, 9, 2)), eps), fill=uniform(-0.2, 0.3)))
        out.append(OpCase(name, "f32,ne=(65536,3,1,1),offset", lambda ctx, f=f: f(layout(ctx, F32, (65536, 3))),
                          fill=uniform(100.0, 100.5), max_nmse=1e-8))
    for t in TYPES:
        for ne, groups in GROUP_SHAPES:
            out.append(OpCase("group_norm", f"{t.name},ne={ne},groups={groups}", lambda ctx, t=t, ne=ne, g=groups:
                              ops.group_norm(layout(ctx, t, ne), g)))
        for how in LAYOUTS[1:]:
            out.append(OpCase("group_norm", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.group_norm(
                layout(ctx, t, (9, 6, 10, 2), how), 4)))
    for eps in EPS:
        out.append(OpCase("group_norm", f"f32,ne=(4,3,6,2),groups=2,eps={eps}", lambda ctx, eps=eps: ops.group_norm(
            layout(ctx, F32, (4, 3, 6, 2)), 2, eps), fill=uniform(-0.2, 0.3)))
    out.append(OpCase("norm", "f32,perf,ne=(160,65536)", lambda ctx: ops.norm(layout(ctx, F32, (160, 65536))),
                      tags=("perf",)))
    out += layer_norm_cases() + rms_norm_mul_cases()
    return out


def _layer_norm(ctx, ne, act, t=F32):
    """norm -> mul(weight) -> add(bias) [-> activation]: LayerNorm's affine, fused by both backends (CUDA also
    in F16 / BF16)."""
    y = ops.add(ops.mul(ops.norm(leaf(ctx, t, ne), 1e-5), leaf(ctx, t, ne[:1])), leaf(ctx, t, ne[:1]))
    return getattr(ops, act)(y) if act else y


def layer_norm_cases():
    out = []
    for ne in ((48, 33, 2), (160, 7), (600, 5), (150, 9), (508, 3)):     # CUDA: vector rows, warp rows, block rows
        for act in (None, "gelu_erf"):
            out.append(OpCase(act or "add", f"fused,layer_norm,ne={ne}", lambda ctx, ne=ne, act=act: _layer_norm(
                ctx, ne, act), reference=evaluate, max_nmse=1e-9,
                kernel="norm\\+scale\\+bias" + (f"\\+{act}" if act else "")))
    for t in (F16, BF16):           # input, weight, bias and result in half precision (sums in F32)
        for ne in ((160, 37), (150, 9), (508, 3)):
            out.append(OpCase("add", f"fused,layer_norm,{t.name},ne={ne}", lambda ctx, t=t, ne=ne: _layer_norm(
                ctx, ne, None, t), reference=evaluate, max_nmse={F16: 1e-5, BF16: 2e-4}[t]))
    return out


def _rms_norm_mul(ctx, t, ne, add: bool):
    """[add(x, r) ->] rms_norm -> mul(weight over ne[0]): RMSNorm with its weight, after the residual add feeding it
    (the rms_norm_mul and add_rms_norm patterns)."""
    x = leaf(ctx, t, ne)
    if add:
        x = ops.add(x, leaf(ctx, t, ne))
    return ops.mul(ops.rms_norm(x, 1e-6), leaf(ctx, t, ne[:1]))


def rms_norm_mul_cases():
    """Rows of decode widths (one token) and of a prompt, odd ones; the CPU runs each as one fused kernel (the add's
    variant in F32)."""
    out = []
    for ne in ((576, 1), (64, 7), (33, 2, 3), (2048, 1), (4096, 3)):
        for t in (F32, F16):
            out.append(OpCase("mul", f"fused,rms_norm+mul,{t.name},ne={ne}", lambda ctx, t=t, ne=ne: _rms_norm_mul(
                ctx, t, ne, False), reference=evaluate, kernel="rms_norm\\+mul"))
        out.append(OpCase("mul", f"fused,add+rms_norm+mul,ne={ne}", lambda ctx, ne=ne: _rms_norm_mul(ctx, F32, ne, True),
                          reference=evaluate, kernel="add\\+rms_norm\\+mul"))
    return out
