"""Device memory for the CUDA backend: one cuMemAlloc block per buffer, tensors at byte offsets in it.

Copies go through the backend's stream, so they are ordered after the kernels launched on it.
"""
from __future__ import annotations

import weakref

import numpy as np

from ...errors import CudaError, OutOfMemoryError
from ..base import Buffer, BufferType
from .device import Device, Stream
from .driver import check, driver


def _free(ptr: int, device: Device):
    device.activate()
    driver.cuMemFree(ptr)


class CUDABufferType(BufferType):
    """Buffers on `device`, copied to and from through `stream`."""

    is_host = False
    alignment = 256

    def __init__(self, device: Device, stream: Stream):
        self.device = device
        self.stream = stream
        self.name = f"cuda:{device.index}"
        self.max_size = device.total_memory

    def alloc_buffer(self, size: int) -> CUDABuffer:
        return CUDABuffer(self, size)


class CUDABuffer(Buffer):
    """`size` bytes of device memory at address `ptr`; a tensor's data is at ptr + tensor.offset."""

    def __init__(self, buffer_type: CUDABufferType, size: int):
        super().__init__(buffer_type, size)
        self.device = buffer_type.device
        self.stream = buffer_type.stream
        self.device.activate()
        try:
            self.ptr = int(check(driver.cuMemAlloc(max(size, 1)), "cuMemAlloc"))
        except CudaError as e:
            if "OUT_OF_MEMORY" in str(e):
                raise OutOfMemoryError(f"{buffer_type.name}: cannot allocate a buffer of {size} bytes ({e})") from None
            raise
        weakref.finalize(self, _free, self.ptr, self.device)

    def tensor_ptr(self, tensor) -> int:
        """The device address of the tensor's first element."""
        return self.ptr + tensor.offset

    # -- raw bytes ----------------------------------------------------------------------------------
    def _check_range(self, offset: int, size: int):
        if offset < 0 or offset + size > self.size:
            raise CudaError(f"{self.buffer_type.name}: bytes [{offset}, {offset + size}) lie outside the "
                            f"buffer of {self.size} bytes")

    def write(self, offset: int, host: np.ndarray):
        """Copy a contiguous host array to `offset`, waiting until it is done."""
        self._check_range(offset, host.nbytes)
        if host.nbytes:
            check(driver.cuMemcpyHtoDAsync(self.ptr + offset, host.ctypes.data, host.nbytes, self.stream.handle),
                  "cuMemcpyHtoDAsync")
            self.stream.synchronize()

    def read(self, offset: int, size: int) -> np.ndarray:
        """A host copy (uint8) of `size` bytes from `offset`, after everything queued on the stream."""
        self._check_range(offset, size)
        out = np.empty(size, dtype=np.uint8)
        if size:
            check(driver.cuMemcpyDtoHAsync(out.ctypes.data, self.ptr + offset, size, self.stream.handle),
                  "cuMemcpyDtoHAsync")
        self.stream.synchronize()
        return out

    def fill(self, offset: int, size: int, byte: int):
        self._check_range(offset, size)
        if size:
            check(driver.cuMemsetD8Async(self.ptr + offset, byte, size, self.stream.handle), "cuMemsetD8Async")

    def read_bytes(self, offset: int, size: int) -> bytes:
        return self.read(offset, size).tobytes()

    # -- tensors ------------------------------------------------------------------------------------
    @staticmethod
    def _host_view(tensor, raw: np.ndarray) -> np.ndarray:
        """The tensor (its storage_shape) as a strided view into `raw`, a host copy of its bytes from its offset."""
        return np.ndarray(tensor.storage_shape, dtype=tensor.type.dtype, buffer=raw, strides=tensor.storage_strides)

    def set_tensor(self, tensor, array):
        values = np.asarray(array).astype(tensor.type.dtype, copy=False)
        if tensor.is_contiguous():
            self.write(tensor.offset, np.ascontiguousarray(values.reshape(tensor.storage_shape)))
            return
        raw = self.read(tensor.offset, tensor.nbytes)   # a strided view: read its span, write the elements, put it back
        self._host_view(tensor, raw)[...] = values
        self.write(tensor.offset, raw)

    def get_tensor(self, tensor) -> np.ndarray:
        if tensor.is_contiguous():
            return self.read(tensor.offset, tensor.nbytes).view(tensor.type.dtype).reshape(tensor.storage_shape)
        return self._host_view(tensor, self.read(tensor.offset, tensor.nbytes)).copy()
