"""IEEE half <-> float32 as LLVM's fpext / fptrunc: vcvtph2ps / vcvtps2ph where the CPU has F16C, so loops of them
vectorise (fp16.py's bit-exact software conversions are the portable reference; these give the same values: round to
nearest even, overflow to inf; a NaN stays a NaN). `cast` is convert.convert with these for float32 <-> F16."""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from .convert import convert


@intrinsic
def from_half(typingctx, bits):
    """IEEE half bits (uint16) -> float32."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def to_half(typingctx, value):
    """float32 -> IEEE half bits (uint16), rounding to nearest even."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


def cast(x, dtype):
    """Element x converted for an array of `dtype` (pass `arr.dtype`), as convert.convert."""


@overload(cast, inline="always")
def _cast(x, dtype):
    target = dtype.dtype if isinstance(dtype, (types.DType, types.Array)) else dtype
    if x == types.float32 and target == types.uint16:
        return lambda x, dtype: to_half(x)
    if x == types.uint16 and target == types.float32:
        return lambda x, dtype: from_half(x)
    return lambda x, dtype: convert(x, dtype)
