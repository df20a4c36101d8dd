"""CUDA devices by name ('cuda', 'cuda:N'), their primary contexts, streams and timing events."""
from __future__ import annotations

import re

from ...errors import CudaError
from .driver import check, driver

_DEVICES: dict[int, Device] = {}


def parse_device(spec: str) -> int:
    """The index of 'cuda' (0) or 'cuda:N'."""
    m = re.fullmatch(r"cuda(?::(\d+))?", str(spec))
    if m is None:
        raise CudaError(f"unknown CUDA device {spec!r}; expected 'cuda' or 'cuda:N' (N = 0, 1, ...)")
    return int(m.group(1) or 0)


def device_count() -> int:
    """How many CUDA devices the driver sees; raises CudaError when there is no usable driver or GPU."""
    try:
        res = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 - libcuda.so missing: the bindings cannot load the driver at all
        raise CudaError(f"no CUDA driver: {e}") from None
    check(res, "cuInit")
    return check(driver.cuDeviceGetCount(), "cuDeviceGetCount")


class Device:
    """One GPU: its primary context (made current by `activate`), name and compute capability."""

    def __init__(self, index: int):
        self.index = index
        self.handle = check(driver.cuDeviceGet(index), "cuDeviceGet")
        self.context = check(driver.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self.activate()
        raw = check(driver.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode()
        attr = driver.CUdevice_attribute
        self.cc = (self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                   self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.sms = self.attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.total_memory = check(driver.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem")

    @property
    def arch(self) -> str:
        """'sm_90' for compute capability 9.0."""
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def attribute(self, attr) -> int:
        return check(driver.cuDeviceGetAttribute(attr, self.handle), "cuDeviceGetAttribute")

    def activate(self):
        check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def __repr__(self) -> str:
        return f"Device(cuda:{self.index}, {self.name}, {self.arch})"


def get_device(spec: str = "cuda") -> Device:
    """The Device named `spec`, made once per process; a clear CudaError for an index that does not exist."""
    index = parse_device(spec)
    if index not in _DEVICES:
        n = device_count()
        if index >= n:
            have = ", ".join(f"cuda:{i}" for i in range(n)) or "none"
            raise CudaError(f"CUDA device {spec!r} does not exist: {n} device(s) found ({have})")
        _DEVICES[index] = Device(index)
    dev = _DEVICES[index]
    dev.activate()
    return dev


class Stream:
    """A non-blocking stream of `device`: copies and kernels of one backend run on it in order."""

    def __init__(self, device: Device):
        self.device = device
        device.activate()
        flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
        self.handle = check(driver.cuStreamCreate(flags), "cuStreamCreate")

    def synchronize(self):
        check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and driver is not None:
            driver.cuStreamDestroy(handle)


class Event:
    """A timing event; `elapsed(start, end)` gives the seconds between two events recorded on a stream."""

    def __init__(self):
        self.handle = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def record(self, stream: Stream):
        check(driver.cuEventRecord(self.handle, stream.handle), "cuEventRecord")

    @staticmethod
    def elapsed(start: Event, end: Event) -> float:
        check(driver.cuEventSynchronize(end.handle), "cuEventSynchronize")
        return check(driver.cuEventElapsedTime(start.handle, end.handle), "cuEventElapsedTime") / 1e3

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and driver is not None:
            driver.cuEventDestroy(handle)
