"""Convolutions: im2col, conv_1d, conv_2d, depthwise conv_2d_dw (both memory layouts) and conv_transpose_2d
(ggml's ggml_im2col, ggml_conv_1d, ggml_conv_2d, ggml_conv_2d_dw_direct, ggml_conv_transpose_2d_p0).

Kernels are cross-correlations as PyTorch's conv1d/conv2d: no flipping. Output sizes follow ggml:
out = (in + 2 * p - d * (k - 1) - 1) // s + 1.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..types import F16, F32, FLOAT_TYPES
from ._common import check_float, check_int, check_tensor, new_node

__all__ = ["im2col", "conv_1d", "conv_2d", "conv_2d_dw", "conv_transpose_2d"]


def conv_out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of a convolution of an input of length n with a kernel of length k."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _check_params(op: str, **params) -> dict:
    """Strides and dilations >= 1, paddings >= 0, all ints; returns them as ints."""
    kinds = {"s": "stride", "p": "padding", "d": "dilation"}
    return {name: check_int(op, f"{kinds[name[0]]} {name}", v, 0 if name[0] == "p" else 1)
            for name, v in params.items()}


def _out_size(op: str, axis: str, n: int, k: int, s: int, p: int, d: int) -> int:
    o = conv_out_size(n, k, s, p, d)
    if o < 1:
        raise ShapeError(f"{op}: kernel of {axis} extent {d * (k - 1) + 1} (k={k}, d={d}) is larger than the "
                         f"padded input {n + 2 * p} ({axis}={n}, p={p}); expected an output {axis} >= 1")
    return o


def _check_channels(op: str, a, b, ca: int, cb: int):
    if ca != cb:
        raise ShapeError(f"{op}: kernel a ne={a.ne} has {ca} input channels but input b ne={b.ne} has {cb}")


def im2col(a, b, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int, is_2D: bool = True, dst_type=F16):
    """Unfold the patches of b that kernel a (used for its shape only) covers, one patch per row.

    2-D: a.ne = (KW, KH, IC, OC), b.ne = (IW, IH, IC, N) -> ne = (IC * KH * KW, OW, OH, N);
    row (n, oh, ow) holds b[n, ic, oh * s1 + kh * d1 - p1, ow * s0 + kw * d0 - p0] at ic * KH * KW + kh * KW + kw
    (0 outside the input). 1-D: a.ne = (K, IC, OC), b.ne = (IL, IC, N) -> ne = (IC * K, OL, N); s1, p1, d1 unused.
    """
    check_tensor("im2col", a)
    check_float("im2col", b, names="b")
    if dst_type not in FLOAT_TYPES:
        raise ShapeError(f"im2col: dst_type must be F32, F16 or BF16, got {getattr(dst_type, 'name', dst_type)!r}")
    if is_2D:
        prm = _check_params("im2col", s0=s0, s1=s1, p0=p0, p1=p1, d0=d0, d1=d1)
        _check_channels("im2col", a, b, a.ne[2], b.ne[2])
        kw, kh, ic = a.ne[0], a.ne[1], a.ne[2]
        ow = _out_size("im2col", "width", b.ne[0], kw, prm["s0"], prm["p0"], prm["d0"])
        oh = _out_size("im2col", "height", b.ne[1], kh, prm["s1"], prm["p1"], prm["d1"])
        ne = (ic * kh * kw, ow, oh, b.ne[3])
    else:
        prm = _check_params("im2col", s0=s0, p0=p0, d0=d0)
        prm.update(s1=1, p1=0, d1=1)
        _check_channels("im2col", a, b, a.ne[1], b.ne[1])
        ol = _out_size("im2col", "length", b.ne[0], a.ne[0], prm["s0"], prm["p0"], prm["d0"])
        ne = (a.ne[1] * a.ne[0], ol, b.ne[2], 1)
    prm["is_2D"] = bool(is_2D)
    return new_node("im2col", dst_type, ne, [a, b], prm)


def conv_2d(a, b, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0, d0: int = 1, d1: int = 1):
    """2-D convolution (PyTorch conv2d, no flip): kernel a.ne = (KW, KH, Cin, Cout) F32/F16, input
    b.ne = (W, H, Cin, N) F32/F16 -> F32 ne = (OW, OH, Cout, N). s: stride, p: zero padding, d: dilation."""
    check_float("conv_2d", a, b)
    prm = _check_params("conv_2d", s0=s0, s1=s1, p0=p0, p1=p1, d0=d0, d1=d1)
    _check_channels("conv_2d", a, b, a.ne[2], b.ne[2])
    ow = _out_size("conv_2d", "width", b.ne[0], a.ne[0], prm["s0"], prm["p0"], prm["d0"])
    oh = _out_size("conv_2d", "height", b.ne[1], a.ne[1], prm["s1"], prm["p1"], prm["d1"])
    return new_node("conv_2d", F32, (ow, oh, a.ne[3], b.ne[3]), [a, b], prm)


def conv_1d(a, b, s0: int = 1, p0: int = 0, d0: int = 1):
    """1-D convolution (PyTorch conv1d): kernel a.ne = (K, Cin, Cout) F32/F16, input b.ne = (L, Cin, N)
    F32/F16 -> F32 ne = (OL, Cout, N)."""
    check_float("conv_1d", a, b)
    for t, what in ((a, "a"), (b, "b")):
        if t.ne[3] != 1:
            raise ShapeError(f"conv_1d: '{what}' ne={t.ne} must be 3-d (ne[3] = 1)")
    prm = _check_params("conv_1d", s0=s0, p0=p0, d0=d0)
    prm.update(s1=1, p1=0, d1=1)
    _check_channels("conv_1d", a, b, a.ne[1], b.ne[1])
    ol = _out_size("conv_1d", "length", b.ne[0], a.ne[0], prm["s0"], prm["p0"], prm["d0"])
    return new_node("conv_1d", F32, (ol, a.ne[2], b.ne[2]), [a, b], prm)


def is_contiguous_channels(t) -> bool:
    """True when a (W, H, C, N) tensor is stored channels-most-contiguous (CWHN): a permuted view of a
    (C, W, H, N) tensor, as ggml_is_contiguous_channels."""
    return t.nb[2] == t.type.size and t.nb[0] > t.nb[2] and t.nb[1] > t.nb[0]


def conv_2d_dw(a, b, s0=1, s1=1, p0=0, p1=0, d0=1, d1=1):
    """Depthwise convolution: kernel a.ne = (KW, KH, 1, C), input b.ne = (W, H, C, N) -> F32
    ne = (OW, OH, C, N), OW = (W + 2*p0 - d0*(KW-1) - 1) // s0 + 1 (likewise OH).

    b may be WHCN (contiguous) or CWHN (the view permute(x, 2, 0, 1, 3) of a (C, W, H, N) tensor x); a CWHN input
    gives a CWHN result: ne as above with the strides of a contiguous (C, OW, OH, N) tensor.
    """
    op = "conv_2d_dw"
    check_float(op, a, b)
    shapes = f"a ne={a.ne}, b ne={b.ne}"
    for name, v in {"s0": s0, "s1": s1, "d0": d0, "d1": d1, "p0": p0, "p1": p1}.items():
        check_int(op, name, v, 0 if name[0] == "p" else 1, shapes)
    kw, kh, one, c = a.ne
    if one != 1 or c != b.ne[2] or kw < 1 or kh < 1:
        raise ShapeError(f"{op}: {shapes}; expected a.ne = (KW, KH, 1, C) with C = b.ne[2] = {b.ne[2]}")
    ow = (b.ne[0] + 2 * p0 - d0 * (kw - 1) - 1) // s0 + 1
    oh = (b.ne[1] + 2 * p1 - d1 * (kh - 1) - 1) // s1 + 1
    if ow < 1 or oh < 1:
        raise ShapeError(f"{op}: the dilated kernel ({d0 * (kw - 1) + 1}x{d1 * (kh - 1) + 1}) is larger than "
                         f"the padded input ({b.ne[0] + 2 * p0}x{b.ne[1] + 2 * p1}); {shapes}, p=({p0}, {p1}), "
                         f"d=({d0}, {d1})")
    cwhn = is_contiguous_channels(b)
    params = {"s0": int(s0), "s1": int(s1), "p0": int(p0), "p1": int(p1), "d0": int(d0), "d1": int(d1),
              "cwhn": cwhn}
    t = new_node(op, F32, (ow, oh, c, b.ne[3]), [a, b], params)
    if cwhn:
        size = F32.size
        t.nb = (size * c, size * c * ow, size, size * c * ow * oh)
    return t


def conv_transpose_2d(a, b, stride: int):
    """Transposed convolution without padding (ggml_conv_transpose_2d_p0): kernel a.ne = (KW, KH, Cout, Cin),
    input b.ne = (W, H, Cin, N) -> F32 ne = ((W-1)*stride + KW, (H-1)*stride + KH, Cout, N)."""
    op = "conv_transpose_2d"
    check_float(op, a, b)
    shapes = f"a ne={a.ne}, b ne={b.ne}"
    check_int(op, "stride", stride, 1, shapes)
    if a.ne[3] != b.ne[2] or a.ne[0] < 1 or a.ne[1] < 1:
        raise ShapeError(f"{op}: {shapes}; expected a.ne = (KW, KH, Cout, Cin) with KW, KH >= 1 and "
                         f"Cin = b.ne[2] = {b.ne[2]}")
    ne = ((b.ne[0] - 1) * stride + a.ne[0], (b.ne[1] - 1) * stride + a.ne[1], a.ne[2], b.ne[3])
    return new_node(op, F32, ne, [a, b], {"stride": int(stride)})
