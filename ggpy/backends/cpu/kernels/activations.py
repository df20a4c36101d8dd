"""The activations fused kernels apply to their results (EPILOGUE_FUNCS, by the op table's activation id), the
scalar functions of those unary ops (elementwise.py's UNARY table holds them too)."""
import numpy as np

from ....optable import ACTIVATIONS
from .common import scalar
from .mathfn import fast_erf, fast_sigmoid, fast_tanh

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_GELU_K = np.float32(2.0 * 0.7978845608028654)      # 2 * sqrt(2 / pi): gelu = x * sigmoid(2u)
_GELU_A = np.float32(0.044715)
_INV_SQRT2 = np.float32(0.7071067811865476)


@scalar
def _relu(x, p0, p1):
    return max(x, _ZERO)


@scalar
def _gelu(x, p0, p1):
    return x * fast_sigmoid(_GELU_K * x * (_ONE + _GELU_A * x * x))


@scalar
def _gelu_erf(x, p0, p1):
    return np.float32(0.5) * x * (_ONE + fast_erf(x * _INV_SQRT2))


@scalar
def _gelu_quick(x, p0, p1):
    return x * fast_sigmoid(np.float32(1.702) * x)


@scalar
def _silu(x, p0, p1):
    return x * fast_sigmoid(x)


@scalar
def _sigmoid(x, p0, p1):
    return fast_sigmoid(x)


@scalar
def _tanh(x, p0, p1):
    return fast_tanh(x)


@scalar
def _no_act(x, p0, p1):
    return x


ACTIVATION_FUNCS = {"relu": _relu, "gelu": _gelu, "gelu_erf": _gelu_erf, "gelu_quick": _gelu_quick, "silu": _silu,
         "sigmoid": _sigmoid, "tanh": _tanh}
EPILOGUE_FUNCS = (_no_act,) + tuple(ACTIVATION_FUNCS[act] for act in sorted(ACTIVATIONS, key=ACTIVATIONS.get))
"""Activations fused kernels apply to their results, by the op table's activation id (0: none)."""


def epilogue_code(act: str | None) -> int:
    """The EPILOGUE_FUNCS index of an activation (the op table's id; None: no activation)."""
    return 0 if act is None else ACTIVATIONS[act]
