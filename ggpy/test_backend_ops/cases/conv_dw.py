"""Cases for conv_2d_dw (WHCN and CWHN inputs, F32/F16 kernels) and conv_transpose_2d."""
from __future__ import annotations

from ... import ops
from ...types import F16, F32
from ..harness import OpCase
from .util import leaf

# (W, H, C, N), (KW, KH), (s0, s1), (p0, p1), (d0, d1)
DW_SHAPES = [
    ((17, 13, 5, 2), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((17, 13, 5, 2), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((19, 11, 4, 1), (3, 5), (3, 2), (2, 1), (1, 1)),
    ((23, 21, 3, 1), (3, 3), (1, 2), (2, 2), (2, 3)),
    ((16, 16, 8, 1), (7, 7), (1, 1), (3, 3), (1, 1)),
    ((9, 7, 6, 1), (2, 4), (1, 3), (0, 0), (1, 1)),
    ((5, 5, 3, 1), (5, 5), (1, 1), (0, 0), (1, 1)),     # kernel as large as the input: one pixel out
    ((40, 33, 32, 1), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 1, 7, 2), (3, 3), (1, 1), (1, 1), (1, 1)),     # every tap but the centre in the padding
]

# (W, H, Cin, N), (KW, KH, Cout), stride
TRANSPOSE_SHAPES = [
    ((8, 6, 4, 1), (2, 2, 3), 2),           # SAM's mask decoder upscaling
    ((7, 5, 3, 2), (3, 3, 5), 1),
    ((7, 5, 3, 1), (3, 3, 2), 2),
    ((5, 6, 4, 1), (2, 2, 3), 3),
    ((6, 4, 2, 1), (3, 3, 4), 3),
    ((9, 9, 16, 1), (2, 3, 6), 2),
]


def dw_input(ctx, ne, cwhn: bool):
    """A (W, H, C, N) input: a contiguous leaf, or (cwhn) a permuted view of a (C, W, H, N) leaf."""
    w, h, c, n = ne
    if cwhn:
        return ops.permute(leaf(ctx, F32, (c, w, h, n)), 2, 0, 1, 3)
    return leaf(ctx, F32, ne)


def dw_case(ne, k, s, p, d, ta=F32, cwhn=False, tags=()):
    def build(ctx):
        a = leaf(ctx, ta, (k[0], k[1], 1, ne[2]))
        return ops.conv_2d_dw(a, dw_input(ctx, ne, cwhn), s[0], s[1], p[0], p[1], d[0], d[1])
    return OpCase("conv_2d_dw", f"{ta.name},{'cwhn' if cwhn else 'whcn'},b={ne},k={k},s={s},p={p},d={d}", build,
                  flops=lambda node: 2 * node.nelements * k[0] * k[1], tags=tags)


def transpose_case(ne, k, stride, ta=F32, tb=F32):
    def build(ctx):
        return ops.conv_transpose_2d(leaf(ctx, ta, (k[0], k[1], k[2], ne[2])), leaf(ctx, tb, ne), stride)
    return OpCase("conv_transpose_2d", f"{ta.name},{tb.name},b={ne},k={k},s={stride}", build,
                  flops=lambda node: 2 * node.src[1].nelements * k[0] * k[1] * k[2])


def cases():
    out = []
    for ne, k, s, p, d in DW_SHAPES:
        for ta in (F32, F16):
            for cwhn in (False, True):
                out.append(dw_case(ne, k, s, p, d, ta, cwhn))
    for ne, k, stride in TRANSPOSE_SHAPES:
        out.append(transpose_case(ne, k, stride))
    out.append(transpose_case((8, 6, 4, 1), (2, 2, 3), 2, F16, F32))
    out.append(transpose_case((7, 5, 3, 1), (3, 3, 2), 3, F32, F16))
    for w, h, c in ((256, 256, 256), (1024, 1024, 3)):
        for cwhn in (False, True):
            out.append(dw_case((w, h, c, 1), (3, 3), (1, 1), (1, 1), (1, 1), cwhn=cwhn, tags=("perf",)))
    return out
