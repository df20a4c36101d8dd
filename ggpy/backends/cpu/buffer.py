"""Host memory for the CPU backend: a numpy byte array, tensors seen as strided numpy views into it."""
from __future__ import annotations

import numpy as np

from ...errors import OutOfMemoryError
from ..base import Buffer, BufferType


def storage_dtype(type_) -> np.dtype:
    """The dtype kernels see: F16 is passed to numba as raw uint16 bits, BF16 as int16 bits (so that load and store
    tell the two apart by the array's type)."""
    if type_.dtype.itemsize == 2:
        return np.dtype(np.uint16) if type_.dtype == np.float16 else np.dtype(np.int16)
    return type_.dtype


class HostBufferType(BufferType):
    name = "cpu"
    is_host = True

    def __init__(self, alignment: int = 64, max_size: int = 2 ** 62):
        self.alignment = alignment
        self.max_size = max_size

    def alloc_buffer(self, size: int) -> HostBuffer:
        return HostBuffer(self, size)


class HostBuffer(Buffer):
    def __init__(self, buffer_type: HostBufferType, size: int):
        super().__init__(buffer_type, size)
        try:
            raw = np.empty(size + buffer_type.alignment, dtype=np.uint8)
        except MemoryError:
            raise OutOfMemoryError(f"cpu: cannot allocate a buffer of {size} bytes") from None
        start = (-raw.ctypes.data) % buffer_type.alignment
        self.data = raw[start:start + size]

    def view(self, tensor, dtype=None) -> np.ndarray:
        """A zero-copy numpy view of `tensor`: shape reversed(ne), strides reversed(nb); a quantized tensor's rows as
        their bytes (Tensor.storage_shape)."""
        dtype = np.dtype(dtype or tensor.type.dtype)
        shape, strides = tensor.storage_shape, tensor.storage_strides
        if tensor.nelements == 0:
            return np.empty(shape, dtype)
        return np.ndarray(shape, dtype=dtype, buffer=self.data, offset=tensor.offset, strides=strides)

    def kernel_view(self, tensor) -> np.ndarray:
        """The view kernels get (F16 as uint16 bits)."""
        return self.view(tensor, storage_dtype(tensor.type))

    def set_tensor(self, tensor, array):
        view = self.view(tensor)
        view[...] = np.asarray(array).astype(view.dtype, copy=False)

    def get_tensor(self, tensor):
        return self.view(tensor).copy()

    def fill(self, offset: int, size: int, byte: int):
        self.data[offset:offset + size] = byte

    def read_bytes(self, offset: int, size: int) -> bytes:
        return self.data[offset:offset + size].tobytes()
