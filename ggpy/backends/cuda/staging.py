"""Pinned host mirrors of a planned graph's inputs and small outputs, copied by the graph's own work.

A GraphRunner over CUDA writes its inputs here (numpy views of page-locked memory: no driver call, no allocation)
and the evaluation copies them to the device first and the staged outputs back last, as steps on the stream that a
CUDA graph captures with the kernels: an evaluation is then one cuGraphLaunch and one wait, whatever it reads and
writes (ggml's llama.cpp decode keeps its inputs on the host side of such copies too). That holds for small inputs
(a token's id, position and mask row), copied by every replay; a big one (a batch of images) is copied by `refresh`,
queued before the replay, only when written since the last one: an unchanged image costs nothing.
"""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .driver import check, driver

ALIGN = 64


def _free_host(ptr: int):
    if driver is not None:
        driver.cuMemFreeHost(ptr)


class _Copy:
    """One staged copy as a program step: `run(stream)` queues it (host <-> device, async)."""

    name = "stage"

    def __init__(self, tensor, host_ptr: int, to_device: bool):
        self.node, self.host_ptr, self.to_device = tensor, host_ptr, to_device
        self.dev_ptr, self.nbytes = tensor.buffer.tensor_ptr(tensor), tensor.nbytes

    def __call__(self, stream):
        if self.to_device:
            check(driver.cuMemcpyHtoDAsync(self.dev_ptr, self.host_ptr, self.nbytes, stream.handle),
                  "cuMemcpyHtoDAsync")
        else:
            check(driver.cuMemcpyDtoHAsync(self.host_ptr, self.dev_ptr, self.nbytes, stream.handle),
                  "cuMemcpyDtoHAsync")


class Staging:
    """Page-locked host memory for `inputs` and `outputs` (contiguous tensors of one plan): `view(t)` is t's values
    there (numpy, full reversed(ne)); `uploads` / `downloads` are the steps copying them in and out (inputs of at most
    `in_graph` bytes: steps of every evaluation), `refresh` queues the bigger inputs' copies when written since."""

    def __init__(self, device, inputs: list, outputs: list, in_graph: int):
        tensors = list(inputs) + list(outputs)
        offsets, size = [], 0
        for t in tensors:
            offsets.append(size)
            size += -(-t.nbytes // ALIGN) * ALIGN
        device.activate()
        self.ptr = int(check(driver.cuMemAllocHost(max(size, 1)), "cuMemAllocHost"))
        weakref.finalize(self, _free_host, self.ptr)
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(size, 1)).from_address(self.ptr))
        self._views = {}
        for t, off in zip(tensors, offsets):
            self._views[id(t)] = raw[off:off + t.nbytes].view(t.type.dtype).reshape(tuple(reversed(t.ne)))
        copies = [_Copy(t, self.ptr + off, True) for t, off in zip(inputs, offsets)]
        self.uploads = [c for c in copies if c.nbytes <= in_graph]
        self._big = {id(c.node): c for c in copies if c.nbytes > in_graph}
        self._written = {}          # id -> big input's copy: written since the last refresh
        self._exposed = {}          # id -> big input's copy: its view handed out (written unseen: copied every time)
        self.downloads = [_Copy(t, self.ptr + off, False) for t, off in zip(outputs, offsets[len(inputs):])]

    def has(self, tensor) -> bool:
        return id(tensor) in self._views

    def write(self, tensor, array):
        """Stage `array` (checked as Tensor.set checks it) for the next evaluation's upload of `tensor`."""
        np.copyto(self._views[id(tensor)], tensor.checked_values(array), casting="unsafe")
        big = self._big.get(id(tensor))
        if big is not None:
            self._written[id(tensor)] = big

    def view(self, tensor) -> np.ndarray:
        """`tensor`'s pinned values themselves (full reversed(ne)): written, the next upload takes them unchecked (a
        big input's view, written where `write` cannot see it, is copied by every refresh from now on)."""
        big = self._big.get(id(tensor))
        if big is not None:
            self._exposed[id(tensor)] = big
        return self._views[id(tensor)]

    def refresh(self, stream):
        """Queue on `stream` the copies of the big inputs written since the last refresh (and of exposed ones)."""
        if self._written or self._exposed:
            for copy in (self._written | self._exposed).values():
                copy(stream)
            self._written = {}

    def read(self, tensor) -> np.ndarray:
        """A copy of `tensor`'s values as the last finished evaluation downloaded them (shape tensor.shape)."""
        return self._views[id(tensor)].reshape(tensor.shape).copy()


def stageable(tensor, limit: int) -> bool:
    """Whether `tensor` can be staged: a contiguous, unquantized tensor of at most `limit` bytes with its own memory."""
    return (not tensor.type.quantized and tensor.buffer is not None and tensor.is_contiguous()
            and tensor.nbytes <= limit and tensor.view_src is None)
