"""Scalar float32 math that LLVM can vectorise (libm's exp/tanh/erf calls block SIMD loops), and row sums in float64."""

import numpy as np
from numba import njit

from .common import scalar
from .fp16 import bits_to_f32, load

_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)


@scalar
def fast_exp(x):
    """exp(x) for float32 x within ~2 ulp; 0 below -86.9 (results under 2e-38 flush to zero), inf above
    88.7228 (float32 overflow), nan kept."""
    x = np.float32(x)
    xc = min(max(x, np.float32(-86.9)), np.float32(88.7228))
    n = np.floor(xc * _LOG2E + np.float32(0.5))
    r = xc - n * _LN2_HI - n * _LN2_LO
    p = np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    y = p * bits_to_f32((np.int32(n) + np.int32(126)) << np.int32(23)) * np.float32(2.0)
    if x < np.float32(-86.9):
        y = np.float32(0.0)
    if x > np.float32(88.7228):
        y = np.float32(np.inf)
    if x != x:
        y = x
    return y


@scalar
def fast_sigmoid(x):
    """1 / (1 + exp(-x)) in float32."""
    return np.float32(1.0) / (np.float32(1.0) + fast_exp(-x))


@scalar
def fast_tanh(x):
    """tanh(x) = 2 sigmoid(2x) - 1, with small |x| by its series to keep relative accuracy near 0."""
    x = np.float32(x)
    y = np.float32(2.0) * fast_sigmoid(np.float32(2.0) * x) - np.float32(1.0)
    x2 = x * x
    small = x * (np.float32(1.0) + x2 * (np.float32(-1.0 / 3.0) + x2 * (np.float32(2.0 / 15.0)
                                                                         + x2 * np.float32(-17.0 / 315.0))))
    if abs(x) < np.float32(0.0625):
        y = small
    return y


@scalar
def fast_erf(x):
    """erf(x) in float32 (Abramowitz & Stegun 7.1.26, absolute error < 1.5e-7), vectorisable."""
    x = np.float32(x)
    ax = abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * ax)
    p = np.float32(1.061405429)
    p = p * t + np.float32(-1.453152027)
    p = p * t + np.float32(1.421413741)
    p = p * t + np.float32(-0.284496736)
    p = p * t + np.float32(0.254829592)
    y = np.float32(1.0) - p * t * fast_exp(-ax * ax)
    return y if x >= np.float32(0.0) else -y


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})
def row_sum(row):
    """float64 sum of a 1-d array."""
    s = 0.0
    for i0 in range(row.shape[0]):
        s += load(row[i0])
    return s
