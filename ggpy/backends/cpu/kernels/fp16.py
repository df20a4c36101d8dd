"""Half-precision support for numba kernels, which have no float16 or bfloat16 type on the CPU.

F16 tensors reach kernels as uint16 arrays of IEEE half bits, BF16 tensors as int16 arrays of bfloat16 bits (the
upper half of a float32). Kernels read every element through `load(x)` (any element type -> float32) and write
through `store(value, arr.dtype)` (float32 -> the array's element type), so one kernel source serves F32, F16,
BF16 and I32 arrays.
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from .common import scalar


@intrinsic
def bits_to_f32(typingctx, bits):
    """Reinterpret the low 32 bits of an integer as a float32."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        return builder.bitcast(value, context.get_value_type(types.float32))
    return types.float32(bits), codegen


@intrinsic
def f32_to_bits(typingctx, value):
    """Reinterpret a float32's bits as a uint32."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))
    return types.uint32(value), codegen


@scalar
def half_to_float(h):
    """IEEE half bits (uint16) -> float32, exact (normals, subnormals, inf, nan)."""
    h32 = np.uint32(h)
    sign = (h32 & np.uint32(0x8000)) << np.uint32(16)
    exp = (h32 >> np.uint32(10)) & np.uint32(0x1F)
    mant = h32 & np.uint32(0x3FF)
    bits = sign | ((exp + np.uint32(112)) << np.uint32(23)) | (mant << np.uint32(13))
    if exp == 0x1F:                                       # inf or nan
        bits = sign | np.uint32(0x7F800000) | (mant << np.uint32(13))
    value = bits_to_f32(bits)
    if exp == 0:                                          # subnormal or zero: mant * 2^-24
        value = np.float32(mant) * np.float32(5.9604644775390625e-08)
        if sign:
            value = -value
    return value


@scalar
def float_to_half(f):
    """float32 -> IEEE half bits (uint16), rounding to nearest even, overflow to inf, nan kept."""
    x = f32_to_bits(np.float32(f))
    sign = (x >> np.uint32(16)) & np.uint32(0x8000)
    ax = x & np.uint32(0x7FFFFFFF)
    mant_odd = (ax >> np.uint32(13)) & np.uint32(1)
    bits = (ax + np.uint32(0xFFF) + mant_odd - np.uint32(0x38000000)) >> np.uint32(13)  # normal: round at bit 13
    if ax < np.uint32(0x38800000):                        # below the smallest normal half: subnormal
        bits = np.uint32(np.rint(bits_to_f32(ax) * np.float32(16777216.0)))
    if ax >= np.uint32(0x477FF000):                       # rounds to >= 65520: overflow to inf
        bits = np.uint32(0x7C00)
    if ax > np.uint32(0x7F800000):                        # nan stays a (quiet) nan
        bits = np.uint32(0x7E00)
    return np.uint16(sign | bits)


@scalar
def bf16_to_float(b):
    """bfloat16 bits (int16) -> float32, exact: the bits are a float32's upper half."""
    return bits_to_f32((np.uint32(b) & np.uint32(0xFFFF)) << np.uint32(16))


@scalar
def float_to_bf16(f):
    """float32 -> bfloat16 bits (int16), rounding to nearest even; inf stays inf, nan a (quiet) nan."""
    x = f32_to_bits(np.float32(f))
    if (x & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.int16(np.uint32(0x7FC0) | ((x >> np.uint32(16)) & np.uint32(0x8000)))
    x = x + np.uint32(0x7FFF) + ((x >> np.uint32(16)) & np.uint32(1))
    return np.int16(x >> np.uint32(16))


def load(x):
    """Any element (float32, float64, int, uint16 half bits or int16 bfloat16 bits) as float32."""


@overload(load, inline="always")
def _load(x):
    if x == types.uint16:
        return lambda x: half_to_float(x)
    if x == types.int16:
        return lambda x: bf16_to_float(x)
    return lambda x: np.float32(x)


def store(value, dtype):
    """`value` converted for an array of `dtype` (float32 -> half bits for uint16, bfloat16 bits for int16). Pass
    `arr.dtype`, not the array: an array argument inside a loop costs reference counting that stops
    vectorisation."""


@overload(store, inline="always")
def _store(value, dtype):
    target = dtype.dtype if isinstance(dtype, (types.DType, types.Array)) else dtype
    if target == types.uint16:
        return lambda value, dtype: float_to_half(value)
    if target == types.int16:
        return lambda value, dtype: float_to_bf16(value)
    return lambda value, dtype: value
