"""Cases for binary ops (with broadcasting), unary functions, sin, cos, scale, clamp and leaky_relu."""
from __future__ import annotations

from ... import ops
from ...optable import UNARY_OPS
from ...types import BF16, F16, F32
from ..harness import OpCase
from ..references import evaluate
from .util import LAYOUTS, TYPES, layout, uniform

BINARY_SHAPES = [  # (a.ne, b.ne)
    ((16, 5, 4, 3), (16, 5, 4, 3)),
    ((10, 5, 4, 3), (10, 1, 1, 1)),
    ((10, 5, 4, 3), (1, 5, 1, 3)),
    ((10, 5, 4, 3), (5, 5, 2, 1)),
    ((1, 1, 1, 1), (1, 1, 1, 1)),
    ((33, 7, 1, 1), (33, 7, 1, 1)),
    ((128, 64, 3, 1), (128, 1, 3, 1)),
    ((70001, 1, 1, 1), (70001, 1, 1, 1)),
    (((1 << 22) + 5, 1, 1, 1), ((1 << 22) + 5, 1, 1, 1)),   # >= 16 MiB output: non-temporal stores
]

UNARY_RANGES = {"sqrt": (0.05, 4.0), "log": (0.05, 4.0), "exp": (-10.0, 10.0), "gelu": (-6.0, 6.0),
                "gelu_erf": (-6.0, 6.0), "gelu_quick": (-6.0, 6.0), "silu": (-8.0, 8.0), "sigmoid": (-8.0, 8.0),
                "tanh": (-5.0, 5.0), "elu": (-4.0, 4.0), "hardswish": (-5.0, 5.0), "hardsigmoid": (-5.0, 5.0),
                "softplus": (-30.0, 30.0)}


def _div_fill(rng, t):
    """Keep divisors away from zero: |x| in [0.5, 2)."""
    x = rng.uniform(0.5, 2.0, size=tuple(reversed(t.ne)))
    return x * rng.choice([-1.0, 1.0], size=x.shape)


def cases():
    out = []
    for op in ("add", "sub", "mul", "div"):
        f = getattr(ops, op)
        for ta in TYPES:
            for tb in (F32, F16) if ta != BF16 else (F32, BF16):
                for ne_a, ne_b in BINARY_SHAPES:
                    if (ta, tb) != (F32, F32) and ne_a[0] > 1000:
                        continue
                    out.append(OpCase(op, f"{ta.name},{tb.name},a={ne_a},b={ne_b}",
                                      lambda ctx, f=f, ta=ta, tb=tb, na=ne_a, nb=ne_b: f(
                                          layout(ctx, ta, na), layout(ctx, tb, nb)),
                                      fill=_div_fill if op == "div" else None))
        for how in LAYOUTS[1:]:
            out.append(OpCase(op, f"f32,a={how},b=(7,1,4,1)",
                              lambda ctx, f=f, how=how: f(layout(ctx, F32, (7, 6, 4, 2), how),
                                                          layout(ctx, F32, (7, 1, 4, 1))),
                              fill=_div_fill if op == "div" else None))
            out.append(OpCase(op, f"f32,a=cont,b={how}",
                              lambda ctx, f=f, how=how: f(layout(ctx, F32, (9, 6, 4, 2)),
                                                          layout(ctx, F32, (9, 6, 4, 2), how)),
                              fill=_div_fill if op == "div" else None))
    for op in UNARY_OPS:
        fill = uniform(*UNARY_RANGES.get(op, (-3.0, 3.0)))
        for t in TYPES:
            for ne in ((128, 10, 3, 2), (7, 3, 1, 1), (50000, 1, 1, 1)):
                out.append(OpCase(op, f"{t.name},ne={ne}", lambda ctx, op=op, t=t, ne=ne: ops.unary(layout(ctx, t, ne), op),
                                  fill=fill))
            for how in LAYOUTS[1:]:
                out.append(OpCase(op, f"{t.name},{how}", lambda ctx, op=op, t=t, how=how: ops.unary(
                    layout(ctx, t, (11, 6, 5, 2), how), op), fill=fill))
    for op in ("sin", "cos"):       # ops of their own in ggml (not unary); arguments as in Fourier features
        f = getattr(ops, op)
        for t in (F32, F16):
            for how in LAYOUTS:
                out.append(OpCase(op, f"{t.name},{how}", lambda ctx, f=f, t=t, how=how: f(
                    layout(ctx, t, (13, 6, 5, 2), how)), fill=uniform(-20.0, 20.0)))
            out.append(OpCase(op, f"{t.name},ne=(50000,1,1,1)", lambda ctx, f=f, t=t: f(
                layout(ctx, t, (50000, 1, 1, 1))), fill=uniform(-20.0, 20.0)))
    for t in TYPES:
        for how in LAYOUTS:
            out.append(OpCase("scale", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.scale(
                layout(ctx, t, (13, 6, 5, 2), how), 0.37, -0.25)))
            out.append(OpCase("clamp", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.clamp(
                layout(ctx, t, (13, 6, 5, 2), how), -0.5, 0.25)))
            out.append(OpCase("leaky_relu", f"{t.name},{how}", lambda ctx, t=t, how=how: ops.leaky_relu(
                layout(ctx, t, (13, 6, 5, 2), how), 0.1)))
    out += chain_cases()
    return out


def _chain(ctx, t, how, ne=(13, 6, 5, 2)):
    """gelu(leaky_relu(clamp(scale(x) - y[bcast]) * z) / w[bcast]) in t, x laid out `how`: a chain of the fusion
    pass (one generated kernel on CUDA), with parameters and broadcast operands."""
    x = ops.scale(layout(ctx, t, ne, how), 0.8, 0.1)
    y = ops.clamp(ops.sub(x, layout(ctx, t, (ne[0], 1, ne[2], 1))), -1.5, 1.5)
    y = ops.leaky_relu(ops.mul(y, layout(ctx, t, ne, "permuted")), 0.2)
    return ops.gelu_erf(ops.div(y, layout(ctx, t, (1, ne[1], 1, ne[3]))))


def _cast_chain(ctx, t):
    """cast(F32 -> t) -> add(bias) -> gelu: what follows a convolution in a half-precision MobileSAM graph."""
    return ops.gelu_erf(ops.add(ops.cast(layout(ctx, F32, (17, 9, 8, 2), "permuted"), t), layout(ctx, t, (17,))))


def chain_cases():
    out = []
    for t in TYPES:
        for how in ("cont", "permuted"):
            out.append(OpCase("gelu_erf", f"fused,chain,{t.name},{how}", lambda ctx, t=t, how=how: _chain(
                ctx, t, how), fill=_div_fill, reference=evaluate, max_nmse={F32: 1e-9}.get(t, 2e-4)))
    for t in (F16, BF16):
        out.append(OpCase("gelu_erf", f"fused,chain,cast+bias+gelu,{t.name}", lambda ctx, t=t: _cast_chain(ctx, t),
                          reference=evaluate, max_nmse=2e-4))
    out.append(OpCase("gelu_erf", "fused,chain,f32,ne=(70001,3)", lambda ctx: _chain(ctx, F32, "cont", (70001, 3, 1, 1)),
                      fill=_div_fill, reference=evaluate, max_nmse=1e-9))
    return out
