"""Elementwise kernels: binary ops with broadcasting, and unary functions (with scale, clamp, leaky_relu).

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits and
every element goes through `load`/`store`. Contiguous operands of the same shape take a flat path.
The op code is compiled in as a constant (`specialize`) and picks the scalar function from a tuple, so
each op gets its own vectorised loop.
"""
import math

import numpy as np

from ..registry import BoundNode, register
from .activations import ACTIVATION_FUNCS as ACT
from .common import (
    STREAM_MIN_BYTES,
    block,
    flat,
    kernel,
    launch,
    row_index,
    scalar,
    stream_store,
)
from .fp16 import load, store
from .mathfn import fast_exp

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_THREE = np.float32(3.0)
_SIX = np.float32(6.0)
_TWENTY = np.float32(20.0)


@scalar
def _add(x, y):
    return x + y


@scalar
def _sub(x, y):
    return x - y


@scalar
def _mul(x, y):
    return x * y


@scalar
def _div(x, y):
    return x / y


BINARY = {"add": _add, "sub": _sub, "mul": _mul, "div": _div}
BINARY_FUNCS = tuple(BINARY.values())
BINARY_CODES = {name: i for i, name in enumerate(BINARY)}


# unary functions f(x, p0, p1): p0/p1 carry scale & bias, clamp bounds, or the leaky slope
@scalar
def _sqr(x, p0, p1):
    return x * x


@scalar
def _sqrt(x, p0, p1):
    return np.float32(math.sqrt(x)) if x >= _ZERO else np.float32(np.nan)


@scalar
def _log(x, p0, p1):
    return np.float32(math.log(x)) if x > _ZERO else (np.float32(-np.inf) if x == _ZERO else np.float32(np.nan))


@scalar
def _exp(x, p0, p1):
    return fast_exp(x)


@scalar
def _abs(x, p0, p1):
    return abs(x)


@scalar
def _neg(x, p0, p1):
    return -x


@scalar
def _sgn(x, p0, p1):
    return _ONE if x > _ZERO else (-_ONE if x < _ZERO else _ZERO)


@scalar
def _step(x, p0, p1):
    return _ONE if x > _ZERO else _ZERO


@scalar
def _elu(x, p0, p1):
    return x if x > _ZERO else fast_exp(x) - _ONE


@scalar
def _hardswish(x, p0, p1):
    return x * min(_ONE, max(_ZERO, (x + _THREE) / _SIX))


@scalar
def _hardsigmoid(x, p0, p1):
    return min(_ONE, max(_ZERO, (x + _THREE) / _SIX))


@scalar
def _softplus(x, p0, p1):
    return x if x > _TWENTY else np.float32(math.log1p(math.exp(np.float64(x))))


@scalar
def _scale(x, p0, p1):
    return x * p0 + p1


@scalar
def _clamp(x, p0, p1):
    return min(max(x, p0), p1)


@scalar
def _leaky_relu(x, p0, p1):
    return x if x > _ZERO else x * p0


@scalar
def _sin(x, p0, p1):
    return np.float32(math.sin(np.float64(x)))


@scalar
def _cos(x, p0, p1):
    return np.float32(math.cos(np.float64(x)))


UNARY = {"sqr": _sqr, "sqrt": _sqrt, "log": _log, "exp": _exp, "abs": _abs, "neg": _neg, "sgn": _sgn,
         "step": _step, "relu": ACT["relu"], "gelu": ACT["gelu"], "gelu_erf": ACT["gelu_erf"],
         "gelu_quick": ACT["gelu_quick"], "silu": ACT["silu"], "sigmoid": ACT["sigmoid"], "tanh": ACT["tanh"], "elu": _elu, "hardswish": _hardswish,
         "hardsigmoid": _hardsigmoid, "softplus": _softplus, "scale": _scale, "clamp": _clamp, "leaky_relu": _leaky_relu, "sin": _sin, "cos": _cos}
UNARY_FUNCS = tuple(UNARY.values())
UNARY_CODES = {name: i for i, name in enumerate(UNARY)}


@kernel
def binary_rows(op, d, a, b, ith, nth):
    """d = a (op) b row by row; b broadcast over a (b.shape[i] divides a.shape[i])."""
    f = BINARY_FUNCS[op]
    ne3, ne2, ne1, ne0 = d.shape
    nb3, nb2, nb1, nb0 = b.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        arow = a[i3, i2, i1]
        brow = b[i3 % nb3, i2 % nb2, i1 % nb1]
        if nb0 == ne0:
            for i0 in range(ne0):
                drow[i0] = store(f(load(arow[i0]), load(brow[i0])), dt)
        elif nb0 == 1:
            v = load(brow[0])
            for i0 in range(ne0):
                drow[i0] = store(f(load(arow[i0]), v), dt)
        else:
            for i0 in range(ne0):
                drow[i0] = store(f(load(arow[i0]), load(brow[i0 % nb0])), dt)


@kernel
def binary_flat(op, d, a, b, ith, nth):
    """d = a (op) b on flat contiguous arrays of one size."""
    f = BINARY_FUNCS[op]
    dt = d.dtype
    i0, i1 = block(d.size, ith, nth)
    d, a, b = d[i0:i1], a[i0:i1], b[i0:i1]     # slices: indices provably >= 0, so the loop vectorises
    for i in range(d.size):
        d[i] = store(f(load(a[i]), load(b[i])), dt)


@kernel
def binary_flat_stream(op, d, a, b, ith, nth):
    """binary_flat for large outputs, with non-temporal stores (scalar ones: the loop is memory-bound)."""
    f = BINARY_FUNCS[op]
    dt = d.dtype
    i0, i1 = block(d.size, ith, nth)
    d, a, b = d[i0:i1], a[i0:i1], b[i0:i1]
    for i in range(d.size):
        stream_store(d, i, store(f(load(a[i]), load(b[i])), dt))


@kernel
def binary_rows_inplace(op, d, b, ith, nth):
    """d = d (op) b row by row, b broadcast (one array read and written: the loop vectorises, which LLVM's
    overlap check would refuse for d and a aliasing)."""
    f = BINARY_FUNCS[op]
    ne3, ne2, ne1, ne0 = d.shape
    nb3, nb2, nb1, nb0 = b.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        brow = b[i3 % nb3, i2 % nb2, i1 % nb1]
        if nb0 == ne0:
            for i0 in range(ne0):
                drow[i0] = store(f(load(drow[i0]), load(brow[i0])), dt)
        elif nb0 == 1:
            v = load(brow[0])
            for i0 in range(ne0):
                drow[i0] = store(f(load(drow[i0]), v), dt)
        else:
            for i0 in range(ne0):
                drow[i0] = store(f(load(drow[i0]), load(brow[i0 % nb0])), dt)


@kernel
def unary_rows(op, p0, p1, d, a, ith, nth):
    """d = f(a) row by row for arrays of any strides."""
    f = UNARY_FUNCS[op]
    ne3, ne2, ne1, ne0 = d.shape
    dt = d.dtype
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        arow = a[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = store(f(load(arow[i0]), p0, p1), dt)


@kernel
def unary_flat(op, p0, p1, d, a, ith, nth):
    """d = f(a) on flat contiguous arrays."""
    f = UNARY_FUNCS[op]
    dt = d.dtype
    i0, i1 = block(d.size, ith, nth)
    d, a = d[i0:i1], a[i0:i1]
    for i in range(d.size):
        d[i] = store(f(load(a[i]), p0, p1), dt)


@kernel
def unary_flat_inplace(op, p0, p1, d, ith, nth):
    """d = f(d) on a flat contiguous array (in place: one array, so the loop vectorises)."""
    f = UNARY_FUNCS[op]
    dt = d.dtype
    i0, i1 = block(d.size, ith, nth)
    d = d[i0:i1]
    for i in range(d.size):
        d[i] = store(f(load(d[i]), p0, p1), dt)


@register(*BINARY_CODES)
def bind_binary(b: BoundNode):
    op = BINARY_CODES[b.node.op]
    d, x, y = b.dst, b.srcs[0], b.srcs[1]
    if _same_memory(d, x) and not np.shares_memory(d, y):
        return launch(binary_rows_inplace, (op, d, y), b.threads_for(d.size), constants=(0,))
    if x.shape == y.shape == d.shape and all(flat(t) is not None for t in (d, x, y)):
        if d.nbytes >= STREAM_MIN_BYTES and not _aliases(d, x, y):
            return launch(binary_flat_stream, (op, flat(d), flat(x), flat(y)), b.threads_for(d.size), constants=(0,))
        return launch(binary_flat, (op, flat(d), flat(x), flat(y)), b.threads_for(d.size), constants=(0,))
    return launch(binary_rows, (op, d, x, y), b.threads_for(d.size), constants=(0,))


def _same_memory(d, a) -> bool:
    """True when a is exactly d's memory (same start, shape and strides): an in-place node."""
    return (d.ctypes.data == a.ctypes.data and d.shape == a.shape and d.strides == a.strides
            and d.dtype == a.dtype)


def _aliases(d, *srcs) -> bool:
    """True when the output shares memory with a source (in-place: its lines are in cache already)."""
    return any(np.shares_memory(d, s) for s in srcs)


def _unary_params(node):
    p = node.op_params
    if node.op == "scale":
        return p["s"], p["b"]
    if node.op == "clamp":
        return p["min"], p["max"]
    if node.op == "leaky_relu":
        return p["slope"], 0.0
    return 0.0, 0.0


@register(*UNARY_CODES)
def bind_unary(b: BoundNode):
    op = UNARY_CODES[b.node.op]
    p0, p1 = (np.float32(p) for p in _unary_params(b.node))
    d, x = b.dst, b.srcs[0]
    if flat(d) is not None and _same_memory(d, x):
        return launch(unary_flat_inplace, (op, p0, p1, flat(d)), b.threads_for(d.size), constants=(0,))
    if flat(d) is not None and flat(x) is not None:
        return launch(unary_flat, (op, p0, p1, flat(d), flat(x)), b.threads_for(d.size), constants=(0,))
    return launch(unary_rows, (op, p0, p1, d, x), b.threads_for(d.size), constants=(0,))
