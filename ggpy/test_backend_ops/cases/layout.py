"""Cases for data movement: dup, cont (and cont_Nd), cast, cpy, concat, pad, repeat, get_rows, set_rows and SAM's
window ops; get_rows from and copies into the quantized types."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...ops.layout import QUANTIZE_TO
from ...types import BF16, F16, F32, I32, Q8_0, QUANT_TYPES
from ..harness import OpCase
from .util import LAYOUTS, layout, leaf

ALL_TYPES = (F32, F16, BF16, I32)


def _wide_ints(rng, t):
    """I32 leafs get values in [-1000, 1000) so that copying the wrong element shows."""
    if t.type == I32:
        return rng.integers(-1000, 1000, size=tuple(reversed(t.ne))).astype("int32")
    return None


def _rows_fill(n_rows: int):
    """Valid row indices in [0, n_rows) for the leaf named 'idx'; wide ints for other I32 leafs."""
    def fill(rng, t):
        if t.name == "idx":
            return rng.integers(0, n_rows, size=tuple(reversed(t.ne))).astype("int32")
        return _wide_ints(rng, t)
    return fill


def _copy_cases():
    out = []
    for t in ALL_TYPES:
        for how in LAYOUTS:
            out.append(OpCase("dup", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.dup(
                layout(ctx, t, (13, 7, 5, 3), how)), fill=_wide_ints))
            out.append(OpCase("cont", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.cont(
                layout(ctx, t, (13, 7, 5, 3), how)), fill=_wide_ints))
        for how in ("cont", "permuted", "permuted3"):
            out.append(OpCase("cont", f"{t.name},{how},cont_1d", lambda ctx, t=t, how=how: ops.cont_1d(
                layout(ctx, t, (9, 5, 3), how), 135), fill=_wide_ints))
            out.append(OpCase("cont", f"{t.name},{how},cont_2d", lambda ctx, t=t, how=how: ops.cont_2d(
                layout(ctx, t, (9, 5, 3), how), 15, 9), fill=_wide_ints))
            out.append(OpCase("cont", f"{t.name},{how},cont_3d", lambda ctx, t=t, how=how: ops.cont_3d(
                layout(ctx, t, (6, 5, 4, 2), how), 4, 10, 6), fill=_wide_ints))
            out.append(OpCase("cont", f"{t.name},{how},cont_4d", lambda ctx, t=t, how=how: ops.cont_4d(
                layout(ctx, t, (6, 5, 4, 2), how), 3, 2, 5, 8), fill=_wide_ints))
    pairs = [(F32, F32), (F32, F16), (F16, F32), (F16, F16), (F32, BF16), (BF16, F32), (BF16, F16), (BF16, BF16),
             (I32, I32)]
    for ta, tb in pairs:
        p = f"{ta.name}->{tb.name}"
        for how in LAYOUTS:
            out.append(OpCase("cpy", f"{p},a={how}", lambda ctx, ta=ta, tb=tb, how=how: ops.cpy(
                layout(ctx, ta, (11, 6, 5, 2), how), leaf(ctx, tb, (11, 6, 5, 2))), fill=_wide_ints))
            out.append(OpCase("cpy", f"{p},a={how},b=permuted", lambda ctx, ta=ta, tb=tb, how=how: ops.cpy(
                layout(ctx, ta, (11, 6, 5, 2), how), layout(ctx, tb, (11, 6, 5, 2), "permuted")), fill=_wide_ints))
        out.append(OpCase("cpy", f"{p},a=(12,5,3),b=(20,9)", lambda ctx, ta=ta, tb=tb: ops.cpy(
            leaf(ctx, ta, (12, 5, 3)), leaf(ctx, tb, (20, 9))), fill=_wide_ints))
        out.append(OpCase("cpy", f"{p},a=permuted(12,5,3),b=transposed(20,9)", lambda ctx, ta=ta, tb=tb: ops.cpy(
            layout(ctx, ta, (12, 5, 3), "permuted"), ops.transpose(leaf(ctx, tb, (9, 20)))), fill=_wide_ints))
        out.append(OpCase("cpy", f"{p},a=(7,6),b=view_2d(big(10,9))", lambda ctx, ta=ta, tb=tb: _cpy_into_view(
            ctx, ta, tb), fill=_wide_ints))
        out.append(OpCase("cpy", f"{p},a=permuted3(7,5,3,2),b=view_2d(big)", lambda ctx, ta=ta, tb=tb: ops.cpy(
            layout(ctx, ta, (7, 5, 3, 2), "permuted3"),
            ops.view_2d(leaf(ctx, tb, (35, 8)), 30, 7, 35 * tb.size, 3 * tb.size)), fill=_wide_ints))
    floats = (F32, F16, BF16)
    for ta, tb in ((x, y) for x in floats for y in floats if x != y):
        for how in ("cont", "permuted", "permuted3"):
            out.append(OpCase("cast", f"{ta.name}->{tb.name},{how}", lambda ctx, ta=ta, tb=tb, how=how: ops.cast(
                layout(ctx, ta, (13, 7, 5, 3), how), tb)))
    for ta, tb in pairs[:3]:   # sizes that split over two workers, runs crossing rows of both sides
        p = f"{ta.name}->{tb.name}"
        out.append(OpCase("cpy", f"{p},a=(300,250),b=(300,250)", lambda ctx, ta=ta, tb=tb: ops.cpy(
            leaf(ctx, ta, (300, 250)), leaf(ctx, tb, (300, 250)))))
        out.append(OpCase("cpy", f"{p},a=permuted(301,250),b=(250,301)", lambda ctx, ta=ta, tb=tb: ops.cpy(
            layout(ctx, ta, (301, 250), "permuted"), leaf(ctx, tb, (250, 301)))))
    for t in (F32, F16):
        out.append(OpCase("cont", f"{t.name},permuted3(97,31,29)", lambda ctx, t=t: ops.cont(
            layout(ctx, t, (97, 31, 29), "permuted3"))))
    return out


def _cpy_into_view(ctx, ta, tb):
    """a (7, 6) copied into the 7 x 6 block of a (10, 9) tensor that starts at column 2 of row 1."""
    big = leaf(ctx, tb, (10, 9))
    return ops.cpy(leaf(ctx, ta, (7, 6)), ops.view_2d(big, 7, 6, big.nb[1], big.nb[1] + 2 * tb.size))


def _concat_cases():
    out = []
    base = (7, 5, 4, 3)
    for dim in range(4):
        ne_b = tuple(2 if i == dim else n for i, n in enumerate(base))
        for t in ALL_TYPES:
            out.append(OpCase("concat", f"{t.name},dim={dim}", lambda ctx, t=t, nb=ne_b, dim=dim: ops.concat(
                leaf(ctx, t, base), leaf(ctx, t, nb), dim), fill=_wide_ints))
        for how in LAYOUTS[1:]:
            out.append(OpCase("concat", f"f32,dim={dim},a={how},b={how}", lambda ctx, how=how, nb=ne_b, dim=dim:
                              ops.concat(layout(ctx, F32, base, how), layout(ctx, F32, nb, how), dim)))
            out.append(OpCase("concat", f"f16,dim={dim},a=cont,b={how}", lambda ctx, how=how, nb=ne_b, dim=dim:
                              ops.concat(leaf(ctx, F16, base), layout(ctx, F16, nb, how), dim)))
    return out


def _pad_cases():
    out = []
    for t in (F32, F16):
        for how in LAYOUTS:
            out.append(OpCase("pad", f"{t.name},{how},lp=(1,2,0,1),rp=(3,1,2,1)", lambda ctx, t=t, how=how: ops.pad_ext(
                layout(ctx, t, (7, 5, 3, 2), how), 1, 3, 2, 1, 0, 2, 1, 1)))
        out.append(OpCase("pad", f"{t.name},rp=(2,3,1,1)", lambda ctx, t=t: ops.pad(
            leaf(ctx, t, (9, 4, 3, 1)), 2, 3, 1, 1)))
        out.append(OpCase("pad", f"{t.name},lp=(4,0,0,3)", lambda ctx, t=t: ops.pad_ext(
            leaf(ctx, t, (5, 3, 2, 1)), 4, 0, 0, 0, 0, 0, 3, 0)))
    return out


def _repeat_cases():
    out = []
    shapes = [((3, 2, 2, 1), (9, 4, 6, 2)), ((5, 3, 1, 2), (5, 6, 3, 4)), ((1, 1, 1, 1), (7, 3, 2, 2)),
              ((13, 1, 1, 1), (13, 5, 4, 3))]
    for t in ALL_TYPES:
        for ne_a, ne_b in shapes:
            out.append(OpCase("repeat", f"{t.name},a={ne_a},b={ne_b}", lambda ctx, t=t, na=ne_a, nb=ne_b: ops.repeat(
                leaf(ctx, t, na), leaf(ctx, t, nb)), fill=_wide_ints))
    for how in LAYOUTS[1:]:
        out.append(OpCase("repeat", f"f32,a={how}", lambda ctx, how=how: ops.repeat(
            layout(ctx, F32, (3, 4, 2, 1), how), leaf(ctx, F32, (6, 8, 6, 2)))))
    return out


def _get_rows(ctx, t, ne_a, n, how="cont"):
    a = layout(ctx, t, ne_a, how)
    idx = leaf(ctx, I32, (n, ne_a[2], ne_a[3])).set_name("idx")
    return ops.get_rows(a, idx)


def _get_rows_cases():
    out = []
    for t in ALL_TYPES:
        for ne_a, n in (((10, 7, 1, 1), 5), ((10, 7, 3, 2), 9), ((1, 4, 2, 3), 6)):
            out.append(OpCase("get_rows", f"{t.name},a={ne_a},n={n}",
                              lambda ctx, t=t, na=ne_a, n=n: _get_rows(ctx, t, na, n), fill=_rows_fill(ne_a[1])))
        for how in LAYOUTS[1:]:
            out.append(OpCase("get_rows", f"{t.name},a={how}", lambda ctx, t=t, how=how: _get_rows(
                ctx, t, (11, 6, 3, 2), 4, how), fill=_rows_fill(6)))
    out.append(OpCase("get_rows", "f32,a=(256,300),n=400", lambda ctx: _get_rows(ctx, F32, (256, 300, 1, 1), 400),
                      fill=_rows_fill(300)))
    return out


SET_ROWS = [  # (a.ne, n, c dims 1-2)
    ((16, 10, 1, 1), 4, (1, 1)),
    ((8, 12, 3, 2), 5, (3, 2)),
    ((8, 12, 3, 2), 5, (1, 1)),
    ((8, 12, 6, 1), 3, (2, 1)),
    ((4, 7, 1, 1), 7, (1, 1)),
    ((576, 64, 1, 1), 9, (1, 1)),         # a KV cache: (head_dim * n_head_kv, n_ctx), one token's row each
    ((256, 600, 1, 1), 300, (1, 1)),      # two CPU workers
]
SET_ROWS_Q8_0 = [  # (a.ne, n, c dims 1-2, b's layout)
    ((576, 64, 1, 1), 9, (1, 1), "cont"),
    ((64, 12, 3, 2), 5, (3, 2), "permuted3"),
    ((256, 600, 1, 1), 300, (1, 1), "cont"),
]


def _distinct_rows(n_rows: int):
    """For the leaf named 'idx': each vector of indices distinct, in [0, n_rows) (two writes of one row race)."""
    def fill(rng, t):
        if t.name == "idx":
            return np.stack([rng.permutation(n_rows)[: t.ne[0]] for _ in range(t.nelements // t.ne[0])]).reshape(
                tuple(reversed(t.ne)))
        return None
    return fill


def _set_rows(ctx, ta, tb, ne_a, n, cd, how_a="cont", how_b="cont"):
    idx = leaf(ctx, I32, (n,) + cd).set_name("idx")
    return ops.set_rows(layout(ctx, ta, ne_a, how_a), layout(ctx, tb, (ne_a[0], n) + ne_a[2:], how_b), idx)


def _set_rows_cases():
    out = []
    for ta, tb in ((F32, F32), (F16, F32), (F16, F16), (BF16, F32), (F32, F16)):
        for ne_a, n, cd in SET_ROWS:
            out.append(OpCase("set_rows", f"a={ta.name}{ne_a},b={tb.name},n={n},c23={cd}", lambda ctx, ta=ta, tb=tb,
                              na=ne_a, n=n, cd=cd: _set_rows(ctx, ta, tb, na, n, cd), fill=_distinct_rows(ne_a[1])))
    for how_a, how_b in (("padded", "cont"), ("cont", "permuted"), ("cont", "permuted3"), ("permuted3", "padded")):
        out.append(OpCase("set_rows", f"f32,a={how_a},b={how_b}", lambda ctx, ha=how_a, hb=how_b: _set_rows(
            ctx, F32, F32, (9, 8, 3, 2), 4, (3, 1), ha, hb), fill=_distinct_rows(8)))
    for ne_a, n, cd, how_b in SET_ROWS_Q8_0:     # a quantized KV cache: each row quantized into its place
        out.append(OpCase("set_rows", f"a=q8_0{ne_a},b=f32 {how_b},n={n},c23={cd}", lambda ctx, na=ne_a, n=n, cd=cd,
                          hb=how_b: _set_rows(ctx, Q8_0, F32, na, n, cd, how_b=hb), fill=_distinct_rows(ne_a[1])))
    return out


EXACT_NMSE = 1e-12
"""Dequantizing and quantizing are exact (ggml's formulas in float32, as gguf.quants): only a last-bit difference
of an fma against gguf's separate multiply and add remains."""


def _quant_cases():
    """get_rows of every quantized type (rows dequantized); cpy and cast of F32 into the types ggpy quantizes: same
    shape, another shape, rows of a bigger tensor (a KV cache's view)."""
    out = []
    for t in QUANT_TYPES:
        k = 2 * t.block
        for ne_a, n in (((k, 7, 1, 1), 5), ((k + t.block, 6, 3, 2), 4)):
            out.append(OpCase("get_rows", f"{t.name},a={ne_a},n={n}", lambda ctx, t=t, na=ne_a, n=n: _get_rows(
                ctx, t, na, n), fill=_rows_fill(ne_a[1]), max_nmse=EXACT_NMSE))
    for t in QUANTIZE_TO:
        out.append(OpCase("cpy", f"f32->{t.name},(96,5,3)", lambda ctx, t=t: ops.cpy(
            leaf(ctx, F32, (96, 5, 3)), leaf(ctx, t, (96, 5, 3))), max_nmse=EXACT_NMSE))
        out.append(OpCase("cpy", f"f32->{t.name},a=(48,8),b=(64,3,2)", lambda ctx, t=t: ops.cpy(
            leaf(ctx, F32, (48, 8)), leaf(ctx, t, (64, 3, 2))), max_nmse=EXACT_NMSE))
        out.append(OpCase("cpy", f"f32->{t.name},b=view_2d(cache(64,10))", lambda ctx, t=t: _cpy_into_rows(ctx, t),
                          max_nmse=EXACT_NMSE))
        out.append(OpCase("cast", f"f32->{t.name}", lambda ctx, t=t: ops.cast(leaf(ctx, F32, (160, 4)), t),
                          max_nmse=EXACT_NMSE))
    return out


def _cpy_into_rows(ctx, t):
    """3 rows of F32 copied into rows 2-4 of a (64, 10) cache of type t."""
    cache = leaf(ctx, t, (64, 10))
    return ops.cpy(leaf(ctx, F32, (64, 3)), ops.view_2d(cache, 64, 3, cache.nb[1], 2 * cache.nb[1]))


def cases():
    return (_copy_cases() + _concat_cases() + _pad_cases() + _repeat_cases() + _get_rows_cases() + _set_rows_cases()
            + _quant_cases())
