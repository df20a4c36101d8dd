"""Cases for the conv family. im2col, conv_1d and conv_2d: odd sizes, strides 1-3, padding, dilation, F32/F16
kernels, non-contiguous inputs, and shapes that make the CPU pick each conv_2d implementation; conv_2d_dw (WHCN
and CWHN inputs, F32/F16 kernels) and conv_transpose_2d."""
from __future__ import annotations

from ... import ops
from ...types import BF16, F16, F32
from ..harness import OpCase
from ..references import evaluate
from .util import layout, leaf


def _flops(node):
    a = node.src[0]
    return 2 * node.nelements * a.nelements // a.ne[-1 if node.op == "conv_2d" else 2]


CONV_2D = [  # (W, H, Cin, Cout, N, KW, KH, s0, s1, p0, p1, d0, d1)
    (9, 7, 3, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1),
    (13, 11, 3, 4, 2, 3, 5, 2, 1, 0, 2, 1, 1),
    (17, 10, 8, 6, 1, 3, 3, 1, 2, 1, 0, 2, 1),
    (12, 15, 6, 7, 2, 2, 3, 3, 3, 1, 1, 1, 2),
    (8, 8, 16, 9, 1, 3, 3, 1, 1, 1, 1, 1, 1),
    (5, 6, 5, 3, 1, 5, 6, 1, 1, 0, 0, 1, 1),
    (11, 9, 7, 5, 2, 4, 2, 2, 3, 3, 1, 2, 2),
    (10, 9, 1, 4, 2, 2, 2, 1, 2, 1, 0, 1, 1),
]
WINOGRAD = [  # 3x3, stride 1, dilation 1: (W, H, Cin, Cout, N, p0, p1); odd sizes, paddings 0-2, Cin != Cout
    (9, 7, 3, 5, 1, 1, 1),
    (8, 8, 16, 9, 2, 1, 1),
    (13, 6, 5, 7, 1, 0, 0),
    (7, 11, 6, 4, 2, 2, 1),
    (3, 3, 4, 6, 1, 0, 2),
    (20, 19, 24, 17, 1, 1, 0),
]
CONV_2D_1X1 = [  # (W, H, Cin, Cout, N)
    (7, 5, 6, 4, 1),
    (9, 3, 16, 11, 2),
    (1, 1, 5, 3, 3),
    (23, 11, 40, 70, 2),   # own GEMM: several row blocks and edge panels, positions split across images
    (8, 8, 400, 20, 1),    # own GEMM: k deeper than one packed block
    (4, 4, 520, 520, 1),   # own GEMM: more columns than one packed B panel holds
]


def _conv_2d(ta, how, w, h, cin, cout, n, kw, kh, s0, s1, p0, p1, d0, d1, tb=F32):
    params = f"{ta.name},b={how}{'' if tb is F32 else ',' + tb.name},in=({w},{h},{cin},{n}),k=({kw},{kh},{cout}),s=({s0},{s1}),p=({p0},{p1}),d=({d0},{d1})"
    return OpCase("conv_2d", params,
                  lambda ctx: ops.conv_2d(layout(ctx, ta, (kw, kh, cin, cout)), layout(ctx, tb, (w, h, cin, n), how),
                                          s0, s1, p0, p1, d0, d1),
                  max_nmse=5e-7, flops=_flops)


def conv_2d_cases(one_by_one: bool):
    """The conv_2d cases with a 1x1 kernel (stride 1, no padding) or the others."""
    out = []
    for ta in (F32, F16):
        for how in ("cont", "permuted", "padded", "permuted3"):
            if one_by_one:
                out += [_conv_2d(ta, how, w, h, ci, co, n, 1, 1, 1, 1, 0, 0, 1, 1) for w, h, ci, co, n in CONV_2D_1X1]
            else:
                out += [_conv_2d(ta, how, *shape) for shape in CONV_2D]
    return out


def winograd_cases():
    """3x3 stride-1 conv_2d cases every implementation can run, Winograd's among them (and two F16 inputs)."""
    return [_conv_2d(ta, how, w, h, ci, co, n, 3, 3, 1, 1, p0, p1, 1, 1)
            for ta in (F32, F16) for how in ("cont", "permuted", "padded", "permuted3")
            for w, h, ci, co, n, p0, p1 in WINOGRAD] + \
        [_conv_2d(F16, how, 11, 9, 6, 5, 2, 3, 3, 1, 1, 1, 2, 1, 1, tb=F16) for how in ("cont", "permuted")]


def _im2col(ta, dst, is_2d, w, h, cin, n, kw, kh, s0, s1, p0, p1, d0, d1):
    params = f"{ta.name}->{dst.name},2D={is_2d},in=({w},{h},{cin},{n}),k=({kw},{kh}),s=({s0},{s1}),p=({p0},{p1}),d=({d0},{d1})"
    if is_2d:
        build = lambda ctx: ops.im2col(layout(ctx, F16, (kw, kh, cin, 2)), layout(ctx, ta, (w, h, cin, n), "permuted3"),
                                       s0, s1, p0, p1, d0, d1, True, dst)
    else:
        build = lambda ctx: ops.im2col(layout(ctx, F16, (kw, cin, 2)), layout(ctx, ta, (w, cin, n), "permuted"),
                                       s0, 0, p0, 0, d0, 0, False, dst)
    return OpCase("im2col", params, build, max_nmse=1e-9)


def _conv_1d(ta, how, length, cin, cout, n, k, s0, p0, d0):
    return OpCase("conv_1d", f"{ta.name},b={how},in=({length},{cin},{n}),k=({k},{cout}),s={s0},p={p0},d={d0}",
                  lambda ctx: ops.conv_1d(layout(ctx, ta, (k, cin, cout)), layout(ctx, F32, (length, cin, n), how), s0, p0, d0),
                  max_nmse=5e-7, flops=_flops)


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


def depthwise_and_transpose_cases():
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


def cases():
    out = conv_2d_cases(False) + conv_2d_cases(True) + winograd_cases() + depthwise_and_transpose_cases()
    for ta in (F32, F16):
        for dst in (F32, F16):
            out.append(_im2col(ta, dst, True, 10, 7, 3, 2, 3, 2, 2, 1, 1, 2, 1, 2))
            out.append(_im2col(ta, dst, False, 19, 1, 4, 2, 5, 1, 3, 1, 2, 0, 2, 1))
        for how in ("cont", "permuted"):
            out.append(_conv_1d(ta, how, 23, 3, 5, 2, 3, 1, 1, 1))
            out.append(_conv_1d(ta, how, 31, 8, 6, 1, 5, 2, 3, 2))
            out.append(_conv_1d(ta, how, 17, 6, 4, 2, 1, 1, 0, 1))
    out.append(OpCase("conv_2d", "perf,3x3,64x64,160->160",
                      lambda ctx: ops.conv_2d(layout(ctx, F32, (3, 3, 160, 160)), layout(ctx, F32, (64, 64, 160, 1)),
                                              1, 1, 1, 1, 1, 1), flops=_flops, tags=("perf",)))
    out.append(OpCase("conv_2d", "perf,3x3,64x64,256->256",
                      lambda ctx: ops.conv_2d(layout(ctx, F32, (3, 3, 256, 256)), layout(ctx, F32, (64, 64, 256, 1)),
                                              1, 1, 1, 1, 1, 1), flops=_flops, tags=("perf",)))
    for dst in (F32, F16):
        out.append(OpCase("im2col", f"perf,f32->{dst.name},3x3,64x64,160",
                          lambda ctx, dst=dst: ops.im2col(layout(ctx, F16, (3, 3, 160, 160)),
                                                          layout(ctx, F32, (64, 64, 160, 1)), 1, 1, 1, 1, 1, 1, True,
                                                          dst), tags=("perf",)))
    out.append(OpCase("conv_2d", "perf,1x1,64x64,320->256",
                      lambda ctx: ops.conv_2d(layout(ctx, F32, (1, 1, 320, 256)), layout(ctx, F32, (64, 64, 320, 1))),
                      flops=_flops, tags=("perf",)))
    out += depthwise_epilogue_cases() + image_conv_epilogue_cases()
    return out


def _image_conv(ctx, t, shape, stride, act):
    """An image's first 3x3 convolution (K = Cin * 9 <= 32) -> [cast to t] -> + bias over the channels [-> act]:
    the epilogue the CUDA backend fuses into conv_2d_direct. shape = (W, H, Cin, Cout, N)."""
    w, h, cin, cout, n = shape
    y = ops.conv_2d(leaf(ctx, t, (3, 3, cin, cout)), leaf(ctx, t, (w, h, cin, n)), stride, stride, 1, 1, 1, 1)
    y = ops.add(y if t is F32 else ops.cast(y, t), ops.reshape_3d(leaf(ctx, t, (cout,)), 1, 1, cout))
    return getattr(ops, act)(y) if act else y


def image_conv_epilogue_cases():
    out = []
    for t, shape, stride, act in ((F32, (37, 21, 3, 16, 2), 2, "gelu_erf"), (F32, (9, 8, 2, 5, 1), 1, None),
                                  (F16, (37, 21, 3, 16, 2), 2, "gelu_erf"), (BF16, (20, 13, 3, 8, 1), 2, "gelu_erf")):
        out.append(OpCase(act or "add", f"fused,conv_2d+{'' if t is F32 else 'cast+'}bias,{t.name},in={shape},s={stride}",
                          lambda ctx, t=t, shape=shape, s=stride, act=act: _image_conv(ctx, t, shape, s, act),
                          reference=evaluate, max_nmse={F32: 1e-9, F16: 1e-5, BF16: 2e-4}[t]))
    return out


def _dw_tokens(ctx, c, w, h, stride, act):
    """Tokens (C, W, H) -> 3x3 depthwise conv in the channels-contiguous layout -> back to tokens -> + bias [-> act]:
    the epilogue pattern both backends fuse into the depthwise kernel."""
    y = ops.conv_2d_dw(leaf(ctx, F32, (3, 3, 1, c)), ops.permute(leaf(ctx, F32, (c, w, h, 1)), 2, 0, 1, 3),
                       stride, stride, 1, 1, 1, 1)
    tokens = ops.permute(y, 1, 2, 0, 3)
    y = ops.add(ops.reshape_3d(tokens, tokens.ne[0], tokens.ne[1], tokens.ne[2]), leaf(ctx, F32, (c,)))
    return getattr(ops, act)(y) if act else y


def depthwise_epilogue_cases():
    out = []
    for c, w, h, stride in ((19, 13, 11, 1), (32, 17, 9, 2), (8, 30, 7, 1)):
        for act in (None, "gelu_erf"):
            out.append(OpCase(act or "add", f"fused,conv_2d_dw_cwhn+bias,C={c},W={w},H={h},s={stride}",
                              lambda ctx, c=c, w=w, h=h, s=stride, act=act: _dw_tokens(ctx, c, w, h, s, act),
                              reference=evaluate, max_nmse=1e-9,
                              kernel="conv_2d_dw_direct_cwhn\\+bias" + (f"\\+{act}" if act else "")))
    for t in (F16, BF16):   # tokens in half precision: conv (F32) -> permute -> cast -> bias -> GELU
        for c, w, h, stride in ((32, 17, 9, 2), (19, 13, 11, 1)):
            out.append(OpCase("gelu_erf", f"fused,conv_2d_dw_cwhn+cast+bias,{t.name},C={c},W={w},H={h},s={stride}",
                              lambda ctx, t=t, c=c, w=w, h=h, s=stride: _dw_tokens_cast(ctx, t, c, w, h, s),
                              reference=evaluate, max_nmse={F16: 1e-5, BF16: 2e-4}[t]))
    return out


def _dw_tokens_cast(ctx, t, c, w, h, stride):
    y = ops.conv_2d_dw(leaf(ctx, t, (3, 3, 1, c)), ops.permute(leaf(ctx, t, (c, w, h, 2)), 2, 0, 1, 3),
                       stride, stride, 1, 1, 1, 1)
    return ops.gelu_erf(ops.add(ops.cast(ops.permute(y, 1, 2, 0, 3), t), leaf(ctx, t, (c,))))
