"""Element types: F32, F16, BF16 and I32, with their numpy dtypes (BF16: ml_dtypes.bfloat16) and sizes in bytes."""
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import TypeMismatchError


@dataclass(frozen=True)
class GGType:
    """An element type. `dtype` is the numpy dtype of a tensor's values; `size` is bytes per element."""

    name: str
    dtype: np.dtype
    size: int

    def __repr__(self) -> str:
        return self.name


F32 = GGType("f32", np.dtype(np.float32), 4)
F16 = GGType("f16", np.dtype(np.float16), 2)
BF16 = GGType("bf16", np.dtype(ml_dtypes.bfloat16), 2)
I32 = GGType("i32", np.dtype(np.int32), 4)

ALL_TYPES = (F32, F16, BF16, I32)
FLOAT_TYPES = (F32, F16, BF16)


def type_of(value) -> GGType:
    """The GGType of a GGType, a name ('f32'), or a numpy dtype."""
    if isinstance(value, GGType):
        return value
    for t in ALL_TYPES:
        if value == t.name:
            return t
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    for t in ALL_TYPES:
        if dt == t.dtype:
            return t
    raise TypeMismatchError(f"unknown tensor type {value!r}; expected one of ggpy.F32, ggpy.F16, ggpy.BF16, ggpy.I32")
