"""Elementwise references: binary ops (ggml broadcasting), the unary functions, scale, clamp, leaky_relu, sin, cos."""
from __future__ import annotations

import math

import numpy as np

from .common import reference, tile


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    "sqr": lambda x: x * x,
    "sqrt": np.sqrt,
    "log": np.log,
    "exp": np.exp,
    "abs": np.abs,
    "neg": np.negative,
    "sgn": np.sign,
    "step": lambda x: (x > 0).astype(np.float64),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_quick": lambda x: x * _sigmoid(1.702 * x),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "hardswish": lambda x: x * np.clip((x + 3) / 6, 0, 1),
    "hardsigmoid": lambda x: np.clip((x + 3) / 6, 0, 1),
    "softplus": lambda x: np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))),
    "sin": np.sin,
    "cos": np.cos,
}


@reference("add", "sub", "mul", "div")
def _binary(node, s):
    a, b = s[0], tile(s[1], s[0].shape)
    return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[node.op](a, b)


@reference(*UNARY)
def _unary(node, s):
    with np.errstate(invalid="ignore", divide="ignore"):
        return UNARY[node.op](s[0])


@reference("scale")
def _scale(node, s):
    return s[0] * node.op_params["s"] + node.op_params["b"]


@reference("clamp")
def _clamp(node, s):
    return np.clip(s[0], node.op_params["min"], node.op_params["max"])


@reference("leaky_relu")
def _leaky_relu(node, s):
    return np.where(s[0] > 0, s[0], s[0] * node.op_params["slope"])
