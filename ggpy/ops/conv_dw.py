"""Depthwise 2D convolution (both memory layouts) and 2D transposed convolution (ggml's conv_2d_dw_direct,
conv_transpose_2d_p0)."""
from __future__ import annotations

from ..errors import ShapeError
from ..types import F32
from ._common import check_float, check_int, new_node

__all__ = ["conv_2d_dw", "conv_transpose_2d"]


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
    for name, v in dict(s0=s0, s1=s1, d0=d0, d1=d1, p0=p0, p1=p1).items():
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
