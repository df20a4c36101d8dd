"""Elementwise ops: binary arithmetic with broadcasting, scale, clamp and the unary functions.

Every result is contiguous with `a`'s type and shape (`ne`). Binary ops broadcast `b` over `a` as ggml
does: each b.ne[i] must divide a.ne[i] (b is tiled).
"""
from __future__ import annotations

from ..errors import ShapeError
from ._common import can_repeat, check_float, new_node
from ..optable import UNARY_OPS


def _binary(op: str, a, b):
    check_float(op, a, b)
    if not can_repeat(b, a):
        raise ShapeError(f"{op}: 'b' ne={b.ne} cannot be broadcast to 'a' ne={a.ne} "
                         "(each b.ne[i] must divide a.ne[i])")
    return new_node(op, a.type, a.ne, [a, b])


def add(a, b):
    """a + b, b broadcast over a. ne = a.ne."""
    return _binary("add", a, b)


def sub(a, b):
    """a - b, b broadcast over a. ne = a.ne."""
    return _binary("sub", a, b)


def mul(a, b):
    """a * b, b broadcast over a. ne = a.ne."""
    return _binary("mul", a, b)


def div(a, b):
    """a / b, b broadcast over a. ne = a.ne."""
    return _binary("div", a, b)


def scale(a, s: float, bias: float = 0.0):
    """a * s + bias (ggml_scale / ggml_scale_bias)."""
    check_float("scale", a)
    return new_node("scale", a.type, a.ne, [a], {"s": float(s), "b": float(bias)})


def scale_bias(a, s: float, b: float):
    return scale(a, s, b)


def clamp(a, min: float, max: float):  # noqa: A002 - ggml's argument names
    """Every element clamped to [min, max]."""
    check_float("clamp", a)
    if min > max:
        raise ShapeError(f"clamp: min={min} must not exceed max={max}")
    return new_node("clamp", a.type, a.ne, [a], {"min": float(min), "max": float(max)})


def leaky_relu(a, negative_slope: float = 0.01):
    """x if x > 0 else negative_slope * x."""
    check_float("leaky_relu", a)
    return new_node("leaky_relu", a.type, a.ne, [a], {"slope": float(negative_slope)})


def unary(a, op: str):
    """Apply the unary function named `op` (one of UNARY_OPS), as ggml_unary."""
    if op not in UNARY_OPS:
        raise ShapeError(f"unary: unknown unary op {op!r}; expected one of {', '.join(UNARY_OPS)}")
    check_float(op, a)
    return new_node(op, a.type, a.ne, [a])


def sin(a):
    """Sine, elementwise (ggml_sin; an op of its own, not a ggml unary). ne = a.ne."""
    check_float("sin", a)
    return new_node("sin", a.type, a.ne, [a])


def cos(a):
    """Cosine, elementwise (ggml_cos; an op of its own, not a ggml unary). ne = a.ne."""
    check_float("cos", a)
    return new_node("cos", a.type, a.ne, [a])


def _make_unary(name: str, doc: str):
    def f(a):
        return unary(a, name)
    f.__name__ = name
    f.__doc__ = doc + " Elementwise; ne = a.ne."
    return f


sqr = _make_unary("sqr", "x * x.")
sqrt = _make_unary("sqrt", "Square root.")
log = _make_unary("log", "Natural logarithm.")
exp = _make_unary("exp", "e ** x.")
abs = _make_unary("abs", "|x|.")  # noqa: A001 - ggml's name
neg = _make_unary("neg", "-x.")
sgn = _make_unary("sgn", "Sign of x (-1, 0 or 1).")
step = _make_unary("step", "1 where x > 0, else 0.")
relu = _make_unary("relu", "max(x, 0).")
gelu = _make_unary("gelu", "GELU, tanh approximation: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).")
gelu_erf = _make_unary("gelu_erf", "GELU, exact: 0.5x(1 + erf(x / sqrt(2))).")
gelu_quick = _make_unary("gelu_quick", "x * sigmoid(1.702x).")
silu = _make_unary("silu", "x * sigmoid(x).")
sigmoid = _make_unary("sigmoid", "1 / (1 + e^-x).")
tanh = _make_unary("tanh", "Hyperbolic tangent.")
elu = _make_unary("elu", "x if x > 0 else e^x - 1.")
hardswish = _make_unary("hardswish", "x * min(1, max(0, (x + 3) / 6)).")
hardsigmoid = _make_unary("hardsigmoid", "min(1, max(0, (x + 3) / 6)).")
softplus = _make_unary("softplus", "log(1 + e^x), x itself above 20 (ggml_softplus).")
