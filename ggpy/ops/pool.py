"""Pooling and resampling: pool_2d, upscale, interpolate (ggml_pool_2d, ggml_upscale, ggml_interpolate)."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import F32
from ._common import check_float, check_int, new_node

__all__ = ["pool_2d", "upscale", "interpolate"]

POOL_OPS = ("max", "avg")
MODES = ("nearest", "bilinear")


def pool_2d(a, op, k0: int, k1: int, s0: int, s1: int, p0: int = 0, p1: int = 0):
    """2-d max or average pooling over dims 0 and 1, as ggml_pool_2d.

    a.ne = (W, H, C, N), F32 or F16, any strides -> F32 ne = (OW, OH, C, N) with OW = (W + 2*p0 - k0) // s0 + 1,
    OH = (H + 2*p1 - k1) // s1 + 1. `op` is "max" or "avg". Padded positions never win a max (a window
    entirely in padding gives -FLT_MAX, as ggml); "avg" divides by k0 * k1, counting padded positions as
    zeros (ggml's CPU; PyTorch's avg_pool2d with count_include_pad=True).
    """
    check_float("pool_2d", a)
    if op not in POOL_OPS:
        raise ShapeError(f"pool_2d: op must be one of {POOL_OPS}, got {op!r} (a ne={a.ne})")
    where = f"a ne={a.ne}"
    k0, k1, s0, s1 = (check_int("pool_2d", n, v, 1, where) for n, v in (("k0", k0), ("k1", k1), ("s0", s0), ("s1", s1)))
    p0, p1 = (check_int("pool_2d", n, v, 0, where) for n, v in (("p0", p0), ("p1", p1)))
    w, h = a.ne[0] + 2 * p0, a.ne[1] + 2 * p1
    if k0 > w or k1 > h:
        raise ShapeError(f"pool_2d: kernel {k0}x{k1} is larger than the padded input {w}x{h} "
                         f"(a ne={a.ne}, p0={p0}, p1={p1})")
    ne = ((w - k0) // s0 + 1, (h - k1) // s1 + 1, a.ne[2], a.ne[3])
    return new_node("pool_2d", F32, ne, [a], {"op": op, "k": (k0, k1), "s": (s0, s1), "p": (p0, p1)})


def interpolate(a, ne0: int, ne1: int, ne2: int, ne3: int, mode: str = "nearest", align_corners: bool = False):
    """`a` resampled to ne = (ne0, ne1, ne2, ne3), any size up or down, as ggml_interpolate (op "upscale").

    a.ne = (W, H, C, N), F32 or F16, any strides; the result has a's type. Dims 0 and 1 follow PyTorch's
    F.interpolate: "nearest" takes src = floor(i * in / out); "bilinear" blends the two neighbours of
    src = (i + 0.5) * in / out - 0.5 (clamped at 0, neighbours clamped to the edge), or with
    align_corners=True src = i * (in - 1) / (out - 1) (0 when out == 1). Dims 2 and 3 always use nearest.
    """
    check_float("interpolate", a)
    if mode not in MODES:
        raise ShapeError(f"interpolate: mode must be one of {MODES}, got {mode!r} (a ne={a.ne})")
    if align_corners and mode != "bilinear":
        raise ShapeError(f"interpolate: align_corners needs mode 'bilinear', got mode {mode!r} (a ne={a.ne})")
    ne = tuple(check_int("interpolate", f"ne{i}", n, 1, f"a ne={a.ne}") for i, n in enumerate((ne0, ne1, ne2, ne3)))
    return new_node("upscale", a.type, ne, [a], {"mode": mode, "align_corners": bool(align_corners)})


def upscale(a, scale_factor: int, mode: str = "nearest", align_corners: bool = False):
    """`a` with dims 0 and 1 multiplied by the int `scale_factor`, as ggml_upscale: a.ne = (W, H, C, N) ->
    ne = (W * f, H * f, C, N), a's type. `mode` and `align_corners` as for interpolate."""
    check_float("upscale", a)
    f = check_int("upscale", "scale_factor", scale_factor, 1, f"a ne={a.ne}")
    return interpolate(a, a.ne[0] * f, a.ne[1] * f, a.ne[2], a.ne[3], mode, align_corners)
