"""Cases for argmax, top_k and argsort: short and vocabulary-long rows (49152, 128256, 151936: several passes on CUDA), k
from 1 to 256, 1 to 4 rows, F16/BF16, non-contiguous rows, ties (equal values by lower index), signed zeros, nan."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...types import F32
from ..harness import OpCase
from .util import LAYOUTS, TYPES, layout

ARGMAX_SHAPES = [(1, 1), (7, 3), (33, 17), (1000, 12), (4097, 17), (49152, 2), (128256, 1), (151936, 4)]
TOP_K = [((1, 1), 1), ((7, 3), 7), ((33, 5, 2, 3), 7), ((1000, 4), 40), ((2048, 2), 7), ((4097, 3), 100),
         ((2049, 2), 256)]
VOCAB_TOP_K = [((49152, 1), 1), ((49152, 3), 40), ((49152, 4), 100), ((128256, 1), 40), ((128256, 2), 100),
               ((128256, 4), 256), ((151936, 1), 256), ((151936, 3), 1)]


def _small_ints(rng, t):
    """Integers in [-3, 3] as floats: rows of many equal values (the lower index first)."""
    return rng.integers(-3, 4, size=tuple(reversed(t.ne))).astype(np.float64)


def _signed_zeros(rng, t):
    """-1, -0.0, 0.0 and 1: -0.0 and 0.0 are equal values."""
    return rng.choice(np.array([-1.0, -0.0, 0.0, 1.0]), size=tuple(reversed(t.ne)))


def _some_nan(rng, t):
    """Uniform values with a few nan (above every number, the lower index first)."""
    x = rng.uniform(-1.0, 1.0, size=tuple(reversed(t.ne)))
    x.reshape(-1)[rng.choice(x.size, size=max(1, x.size // 50), replace=False)] = np.nan
    return x


def _argmax(t, ne, how="cont"):
    return lambda ctx: ops.argmax(layout(ctx, t, ne, how))


def _top_k(t, ne, k, how="cont"):
    return lambda ctx: ops.top_k(layout(ctx, t, ne, how), k)


ARGSORT_SHAPES = [(1, 1), (8, 3), (33, 5, 2), (128, 7), (257, 2), (2048, 2)]


def _argsort(t, ne, order, how="cont"):
    return lambda ctx: ops.argsort(layout(ctx, t, ne, how), order)


def argsort_cases():
    """argsort both ways: a router's rows (8 to 128 experts), odd and long rows (2048: CUDA's one-block sort), F16/BF16,
    non-contiguous rows, ties, signed zeros, nan."""
    out = []
    for order in ("asc", "desc"):
        for t in TYPES:
            for ne in ARGSORT_SHAPES:
                out.append(OpCase("argsort", f"{t.name},ne={ne},{order}", _argsort(t, ne, order)))
                out.append(OpCase("argsort", f"{t.name},ne={ne},{order},ties", _argsort(t, ne, order), fill=_small_ints))
        for how in LAYOUTS[1:]:
            out.append(OpCase("argsort", f"f32,{how},{order}", _argsort(F32, (13, 6), order, how)))
        for fill in (_signed_zeros, _some_nan):
            out.append(OpCase("argsort", f"f32,ne=(500,3),{order},{fill.__name__[1:]}", _argsort(F32, (500, 3), order),
                              fill=fill))
    return out


def cases():
    out = argsort_cases()
    for t in TYPES:
        for ne in ARGMAX_SHAPES[:5]:
            out.append(OpCase("argmax", f"{t.name},ne={ne}", _argmax(t, ne)))
            out.append(OpCase("argmax", f"{t.name},ne={ne},ties", _argmax(t, ne), fill=_small_ints))
        for how in LAYOUTS[1:]:
            out.append(OpCase("argmax", f"{t.name},{how}", _argmax(t, (13, 6), how)))
            out.append(OpCase("top_k", f"{t.name},{how},k=5", _top_k(t, (13, 6), 5, how)))
        for ne, k in TOP_K:
            out.append(OpCase("top_k", f"{t.name},ne={ne},k={k}", _top_k(t, ne, k)))
            out.append(OpCase("top_k", f"{t.name},ne={ne},k={k},ties", _top_k(t, ne, k), fill=_small_ints))
    for ne in ARGMAX_SHAPES[5:]:
        out.append(OpCase("argmax", f"f32,ne={ne}", _argmax(F32, ne)))
        out.append(OpCase("argmax", f"f32,ne={ne},ties", _argmax(F32, ne), fill=_small_ints))
    for ne, k in VOCAB_TOP_K:
        out.append(OpCase("top_k", f"f32,ne={ne},k={k}", _top_k(F32, ne, k)))
    for ne, k in (((128256, 2), 100), ((151936, 1), 256), ((5000, 3), 40)):
        out.append(OpCase("top_k", f"f32,ne={ne},k={k},ties", _top_k(F32, ne, k), fill=_small_ints))
    for fill in (_signed_zeros, _some_nan):
        name = fill.__name__[1:]
        out.append(OpCase("argmax", f"f32,ne=(5000,3),{name}", _argmax(F32, (5000, 3)), fill=fill))
        out.append(OpCase("top_k", f"f32,ne=(5000,3),k=100,{name}", _top_k(F32, (5000, 3), 100), fill=fill))
    return out
