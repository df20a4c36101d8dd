"""Elementwise kernels: binary ops with broadcasting, and unary functions (with scale, clamp, leaky_relu).

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits and
every element goes through `load`/`store`. Contiguous operands of the same shape take a flat path.
"""
import math

import numpy as np
from numba import njit, prange

from ..registry import BoundNode, register
from .common import block
from .fp16 import load, store
from .mathfn import fast_exp, fast_sigmoid, fast_tanh

BINARY_CODES = {"add": 0, "sub": 1, "mul": 2, "div": 3}

UNARY_CODES = {name: i for i, name in enumerate((
    "sqr", "sqrt", "log", "exp", "abs", "neg", "sgn", "step", "relu", "gelu", "gelu_erf", "gelu_quick", "silu",
    "sigmoid", "tanh", "elu", "hardswish", "hardsigmoid", "scale", "clamp", "leaky_relu"))}

_SQRT_2_OVER_PI = np.float32(0.7978845608028654)
_GELU_COEF_A = np.float32(0.044715)
_INV_SQRT2 = 0.7071067811865476


@njit(cache=True)
def _binary(op, x, y):
    if op == 0:
        return x + y
    if op == 1:
        return x - y
    if op == 2:
        return x * y
    return x / y


@njit(nogil=True, cache=True)
def binary_rows(op, d, a, b, ith, nth):
    """d = a (op) b row by row; b broadcast over a (b.shape[i] divides a.shape[i])."""
    ne3, ne2, ne1, ne0 = d.shape
    nb3, nb2, nb1, nb0 = b.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3 = r // (ne2 * ne1)
        i2 = (r // ne1) % ne2
        i1 = r % ne1
        drow = d[i3, i2, i1]
        arow = a[i3, i2, i1]
        brow = b[i3 % nb3, i2 % nb2, i1 % nb1]
        if nb0 == ne0:
            for i0 in range(ne0):
                drow[i0] = store(_binary(op, load(arow[i0]), load(brow[i0])), drow)
        else:
            for i0 in range(ne0):
                drow[i0] = store(_binary(op, load(arow[i0]), load(brow[i0 % nb0])), drow)


@njit(nogil=True, cache=True)
def binary_flat(op, d, a, b, ith, nth):
    """d = a (op) b on flat contiguous arrays of one size."""
    i0, i1 = block(d.size, ith, nth)
    if op == 0:
        for i in range(i0, i1):
            d[i] = store(load(a[i]) + load(b[i]), d)
    elif op == 1:
        for i in range(i0, i1):
            d[i] = store(load(a[i]) - load(b[i]), d)
    elif op == 2:
        for i in range(i0, i1):
            d[i] = store(load(a[i]) * load(b[i]), d)
    else:
        for i in range(i0, i1):
            d[i] = store(load(a[i]) / load(b[i]), d)


@njit(parallel=True, cache=True)
def binary_rows_par(op, d, a, b, nth):
    for ith in prange(nth):
        binary_rows(op, d, a, b, ith, nth)


@njit(parallel=True, cache=True)
def binary_flat_par(op, d, a, b, nth):
    for ith in prange(nth):
        binary_flat(op, d, a, b, ith, nth)


@njit(cache=True)
def _unary(op, x, p0, p1):
    """The unary function with code `op` at float32 x (p0, p1: scale/bias, clamp bounds, slope)."""
    zero = np.float32(0.0)
    one = np.float32(1.0)
    if op == 0:
        return x * x
    if op == 1:
        return np.float32(math.sqrt(x)) if x >= zero else np.float32(np.nan)
    if op == 2:
        if x > zero:
            return np.float32(math.log(x))
        return np.float32(-np.inf) if x == zero else np.float32(np.nan)
    if op == 3:
        return fast_exp(x)
    if op == 4:
        return abs(x)
    if op == 5:
        return -x
    if op == 6:
        return one if x > zero else (-one if x < zero else zero)
    if op == 7:
        return one if x > zero else zero
    if op == 8:
        return max(x, zero)
    if op == 9:
        return x * fast_sigmoid(np.float32(2.0) * _SQRT_2_OVER_PI * x * (one + _GELU_COEF_A * x * x))
    if op == 10:
        return np.float32(0.5 * x * (1.0 + math.erf(x * _INV_SQRT2)))
    if op == 11:
        return x * fast_sigmoid(np.float32(1.702) * x)
    if op == 12:
        return x * fast_sigmoid(x)
    if op == 13:
        return fast_sigmoid(x)
    if op == 14:
        return fast_tanh(x)
    if op == 15:
        return x if x > zero else fast_exp(x) - one
    if op == 16:
        return x * min(one, max(zero, (x + np.float32(3.0)) / np.float32(6.0)))
    if op == 17:
        return min(one, max(zero, (x + np.float32(3.0)) / np.float32(6.0)))
    if op == 18:
        return x * p0 + p1
    if op == 19:
        return min(max(x, p0), p1)
    return x if x > zero else x * p0


@njit(nogil=True, cache=True)
def unary_rows(op, p0, p1, d, a, ith, nth):
    """d = f(a) row by row for arrays of any strides."""
    ne3, ne2, ne1, ne0 = d.shape
    p0 = np.float32(p0)
    p1 = np.float32(p1)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3 = r // (ne2 * ne1)
        i2 = (r // ne1) % ne2
        i1 = r % ne1
        drow = d[i3, i2, i1]
        arow = a[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = store(_unary(op, load(arow[i0]), p0, p1), drow)


@njit(nogil=True, cache=True)
def unary_flat(op, p0, p1, d, a, ith, nth):
    """d = f(a) on flat contiguous arrays (the op test is hoisted out of the loop by LLVM)."""
    p0 = np.float32(p0)
    p1 = np.float32(p1)
    i0, i1 = block(d.size, ith, nth)
    for i in range(i0, i1):
        d[i] = store(_unary(op, load(a[i]), p0, p1), d)


@njit(parallel=True, cache=True)
def unary_rows_par(op, p0, p1, d, a, nth):
    for ith in prange(nth):
        unary_rows(op, p0, p1, d, a, ith, nth)


@njit(parallel=True, cache=True)
def unary_flat_par(op, p0, p1, d, a, nth):
    for ith in prange(nth):
        unary_flat(op, p0, p1, d, a, ith, nth)


def _flat(arr: np.ndarray):
    """A 1-d view of a C-contiguous array, or None."""
    return arr.reshape(-1) if arr.flags.c_contiguous else None


@register(*BINARY_CODES)
def bind_binary(b: BoundNode):
    op = BINARY_CODES[b.node.op]
    d, x, y = b.dst, b.srcs[0], b.srcs[1]
    nth = b.threads_for(d.size)
    if x.shape == y.shape == d.shape and all(_flat(t) is not None for t in (d, x, y)):
        args = (op, _flat(d), _flat(x), _flat(y))
        kernel, kernel_par = binary_flat, binary_flat_par
    else:
        args = (op, d, x, y)
        kernel, kernel_par = binary_rows, binary_rows_par
    if nth == 1:
        return lambda: kernel(*args, 0, 1)
    return lambda: kernel_par(*args, nth)


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
    p0, p1 = _unary_params(b.node)
    d, x = b.dst, b.srcs[0]
    nth = b.threads_for(d.size)
    if _flat(d) is not None and _flat(x) is not None:
        args = (op, p0, p1, _flat(d), _flat(x))
        kernel, kernel_par = unary_flat, unary_flat_par
    else:
        args = (op, p0, p1, d, x)
        kernel, kernel_par = unary_rows, unary_rows_par
    if nth == 1:
        return lambda: kernel(*args, 0, 1)
    return lambda: kernel_par(*args, nth)
