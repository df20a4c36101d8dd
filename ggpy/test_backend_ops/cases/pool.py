"""Cases for pool_2d and upscale (upscale and interpolate): odd sizes, strides, padding, all modes, F32/F16,
non-contiguous inputs."""
from __future__ import annotations

from ... import ops
from ...types import F16, F32
from ..harness import OpCase
from .util import LAYOUTS, TYPES, layout

POOL_SHAPES = [  # (a.ne, k0, k1, s0, s1, p0, p1)
    ((7, 5, 3, 2), 2, 2, 2, 2, 0, 0),
    ((9, 11, 2, 1), 3, 3, 1, 1, 1, 1),
    ((13, 8, 3, 2), 3, 2, 2, 3, 1, 0),
    ((10, 9, 2, 2), 5, 4, 3, 2, 2, 1),
    ((6, 7, 4, 1), 1, 1, 2, 3, 0, 0),
    ((5, 5, 2, 2), 5, 5, 1, 1, 2, 2),
    ((8, 3, 3, 1), 4, 3, 3, 1, 2, 1),
    ((33, 29, 8, 2), 3, 3, 2, 2, 1, 1),
]

SIZES = [  # (a.ne, result ne)
    ((5, 4, 3, 2), (10, 8, 3, 2)),
    ((7, 5, 2, 1), (17, 11, 2, 1)),
    ((9, 8, 3, 1), (4, 3, 3, 1)),
    ((6, 7, 2, 2), (13, 3, 2, 2)),
    ((1, 3, 2, 1), (5, 1, 2, 1)),
    ((5, 4, 3, 2), (5, 4, 3, 2)),
    ((6, 5, 2, 3), (9, 7, 5, 2)),
    ((2, 3, 1, 1), (82, 123, 1, 1)),    # nearest: float32 i * (in / out) rounds below the exact i * in / out
    ((4, 3, 3, 1), (94, 165, 1, 1)),
]

MODES = [("nearest", False), ("bilinear", False), ("bilinear", True)]


def _mode_id(mode, ac):
    return mode + (",align_corners" if ac else "")


def _pool_cases():
    out = []
    for t in TYPES:
        for op in ("max", "avg"):
            for ne, k0, k1, s0, s1, p0, p1 in POOL_SHAPES:
                out.append(OpCase("pool_2d", f"{t.name},{op},a={ne},k=({k0},{k1}),s=({s0},{s1}),p=({p0},{p1})",
                                  lambda ctx, t=t, op=op, ne=ne, k0=k0, k1=k1, s0=s0, s1=s1, p0=p0, p1=p1:
                                  ops.pool_2d(layout(ctx, t, ne), op, k0, k1, s0, s1, p0, p1)))
            for how in LAYOUTS[1:]:
                out.append(OpCase("pool_2d", f"{t.name},{op},{how},a=(9,7,3,2),k=(3,2),s=(2,1),p=(1,1)",
                                  lambda ctx, t=t, op=op, how=how: ops.pool_2d(
                                      layout(ctx, t, (9, 7, 3, 2), how), op, 3, 2, 2, 1, 1, 1)))
    for op in ("max", "avg"):   # enough rows for two workers
        out.append(OpCase("pool_2d", f"f32,{op},a=(130,97,6,1),k=(3,3),s=(1,1),p=(1,1)", lambda ctx, op=op:
                          ops.pool_2d(layout(ctx, F32, (130, 97, 6, 1)), op, 3, 3, 1, 1, 1, 1)))
    return out


def _upscale_cases():
    out = []
    for t in TYPES:
        for mode, ac in MODES:
            m = _mode_id(mode, ac)
            for f in (1, 2, 3):
                out.append(OpCase("upscale", f"{t.name},{m},upscale,a=(5,3,2,2),f={f}",
                                  lambda ctx, t=t, mode=mode, ac=ac, f=f: ops.upscale(
                                      layout(ctx, t, (5, 3, 2, 2)), f, mode, align_corners=ac)))
            for ne_a, ne in SIZES:
                out.append(OpCase("upscale", f"{t.name},{m},interpolate,a={ne_a},ne={ne}",
                                  lambda ctx, t=t, mode=mode, ac=ac, na=ne_a, ne=ne: ops.interpolate(
                                      layout(ctx, t, na), *ne, mode, align_corners=ac)))
            for how in LAYOUTS[1:]:
                out.append(OpCase("upscale", f"{t.name},{m},interpolate,{how},a=(7,6,3,2),ne=(11,4,3,2)",
                                  lambda ctx, t=t, mode=mode, ac=ac, how=how: ops.interpolate(
                                      layout(ctx, t, (7, 6, 3, 2), how), 11, 4, 3, 2, mode, align_corners=ac)))
    for mode, ac in MODES:   # enough rows for two workers
        out.append(OpCase("upscale", f"f32,{_mode_id(mode, ac)},interpolate,a=(64,50,8,1),ne=(150,111,8,1)",
                          lambda ctx, mode=mode, ac=ac: ops.interpolate(
                              layout(ctx, F32, (64, 50, 8, 1)), 150, 111, 8, 1, mode, align_corners=ac)))
    out.append(OpCase("upscale", "f16,nearest,upscale,a=(40,30,16,2),f=4", lambda ctx: ops.upscale(
        layout(ctx, F16, (40, 30, 16, 2)), 4)))
    return out


def cases():
    return _pool_cases() + _upscale_cases()
