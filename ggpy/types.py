"""Element types: F32, F16, BF16 and I32 with their numpy dtypes (BF16: ml_dtypes.bfloat16), and ggml's
block-quantized types Q4_0 ... Q6_K, Q2_K, Q3_K, IQ4_NL and IQ4_XS, whose values are blocks of `block` elements stored in `size` bytes (ggml's
blck_size and type_size); their tensors are seen from numpy as raw bytes (uint8). `ggml_id` is ggml's type number,
the tensor type a GGUF file records."""
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import TypeMismatchError


@dataclass(frozen=True)
class GGType:
    """An element type: `size` bytes per block of `block` elements (1 for the plain types, whose `dtype` is that
    of one value; uint8 for quantized types, whose tensors numpy sees as bytes)."""

    name: str
    dtype: np.dtype
    size: int
    ggml_id: int
    block: int = 1

    @property
    def quantized(self) -> bool:
        return self.block > 1

    def row_bytes(self, ne0: int) -> int:
        """Bytes of a row of ne0 elements (ne0 a multiple of `block`)."""
        return ne0 // self.block * self.size

    def __repr__(self) -> str:
        return self.name


F32 = GGType("f32", np.dtype(np.float32), 4, 0)
F16 = GGType("f16", np.dtype(np.float16), 2, 1)
BF16 = GGType("bf16", np.dtype(ml_dtypes.bfloat16), 2, 30)
I32 = GGType("i32", np.dtype(np.int32), 4, 26)

_BYTES = np.dtype(np.uint8)
Q4_0 = GGType("q4_0", _BYTES, 18, 2, 32)     # f16 d; 16 bytes: element j in the low nibble of byte j, j+16 in its high
Q4_1 = GGType("q4_1", _BYTES, 20, 3, 32)     # f16 d, f16 m; nibbles as Q4_0; value d * q + m
Q5_0 = GGType("q5_0", _BYTES, 22, 6, 32)     # f16 d; 32-bit qh (bit j: the fifth bit of element j); nibbles as Q4_0
Q5_1 = GGType("q5_1", _BYTES, 24, 7, 32)     # f16 d, f16 m; qh; nibbles
Q8_0 = GGType("q8_0", _BYTES, 34, 8, 32)     # f16 d; 32 int8
Q4_K = GGType("q4_k", _BYTES, 144, 12, 256)  # f16 d, f16 dmin; 12 bytes of 6-bit scales and mins; 128 bytes of nibbles
Q5_K = GGType("q5_k", _BYTES, 176, 13, 256)  # as Q4_K, then 32 bytes of fifth bits before the nibbles
Q6_K = GGType("q6_k", _BYTES, 210, 14, 256)  # 128 bytes low nibbles, 64 bytes 2-bit highs, 16 int8 scales, f16 d
Q2_K = GGType("q2_k", _BYTES, 84, 10, 256)   # 16 bytes of 4-bit scale | 4-bit min << 4; 64 bytes of 2-bit q; f16 d, dmin
Q3_K = GGType("q3_k", _BYTES, 110, 11, 256)  # 32 bytes hmask (third bits), 64 bytes 2-bit q, 12 bytes 6-bit scales, f16 d
IQ4_NL = GGType("iq4_nl", _BYTES, 18, 20, 32)  # f16 d; 16 bytes of nibbles (as Q4_0), each an index into KVALUES_IQ4NL
IQ4_XS = GGType("iq4_xs", _BYTES, 136, 23, 256)  # f16 d, u16 high scale bits, 4 bytes low scale nibbles, 128 bytes nibbles

FLOAT_TYPES = (F32, F16, BF16)
QUANT_TYPES = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS)
KVALUES_IQ4NL = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
"""IQ4_NL's and IQ4_XS's 16 values a nibble indexes (ggml's kvalues_iq4nl), times the block's scale."""
ALL_TYPES = (F32, F16, BF16, I32) + QUANT_TYPES
BY_GGML_ID = {t.ggml_id: t for t in ALL_TYPES}


def type_of(value) -> GGType:
    """The GGType of a GGType, a name ('f32', 'q4_0'), or a numpy dtype."""
    if isinstance(value, GGType):
        return value
    for t in ALL_TYPES:
        if isinstance(value, str) and value.lower() == t.name:
            return t
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    for t in ALL_TYPES[:4]:
        if dt == t.dtype:
            return t
    raise TypeMismatchError(f"unknown tensor type {value!r}; expected one of ggpy.F32, F16, BF16, I32 or a quantized "
                            f"type ({', '.join(t.name for t in QUANT_TYPES)})")
