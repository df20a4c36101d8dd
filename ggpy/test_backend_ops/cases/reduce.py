"""Cases for sum, sum_rows and mean: odd and long shapes, F16 inputs, non-contiguous inputs."""
from __future__ import annotations

from ... import ops
from ...types import F32
from ..harness import OpCase
from .util import LAYOUTS, TYPES, layout

SHAPES = [(1, 1, 1, 1), (7, 3, 1, 1), (33, 5, 4, 3), (1000, 7, 2, 1), (70001, 1, 1, 1)]


OFFSET_NMSE = 1e-13
"""A running float32 sum of 70001 values in [100, 101) is off by ~4e-6 relative (NMSE ~1e-11): the offset cases
ask for what a pairwise, wide or float64 sum gives (one output value per row: NMSE is its squared error)."""


def _offset(rng, t):
    """Values in [100, 101): a float32 running sum of a long row would lose digits."""
    return rng.uniform(100.0, 101.0, size=tuple(reversed(t.ne)))


def cases():
    out = []
    for name in ("sum", "sum_rows", "mean"):
        f = getattr(ops, name)
        for t in TYPES:
            for ne in SHAPES:
                out.append(OpCase(name, f"{t.name},ne={ne}", lambda ctx, f=f, t=t, ne=ne: f(layout(ctx, t, ne))))
            for how in LAYOUTS[1:]:
                out.append(OpCase(name, f"{t.name},{how}", lambda ctx, f=f, t=t, how=how: f(
                    layout(ctx, t, (13, 6, 5, 2), how))))
        out.append(OpCase(name, "f32,ne=(70001,3,1,1),offset", lambda ctx, f=f: f(layout(ctx, F32, (70001, 3))),
                          fill=_offset, max_nmse=OFFSET_NMSE))
    return out
