"""Launch: one kernel launch with its arguments packed once per plan, the step the CUDA backend runs and captures."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from .device import Stream
from .driver import check, driver


def dim3(v) -> tuple[int, int, int]:
    """(x, y, z) of an int or a tuple of up to three."""
    v = (v,) if isinstance(v, int) else tuple(v)
    return v + (1,) * (3 - len(v))


@dataclass
class Launch:
    """One kernel launch of `node`'s step `name`: `params` is the void** kernelParams array over `args` (the
    argument structs, kept alive here). `function` is None until its module is loaded at the end of the plan's
    batch (modules.Modules); run before that (autotune measuring a node), `resolve()` loads it."""

    node: object
    name: str
    function: object
    grid: tuple             # (x, y, z) blocks
    block: tuple            # (x, y, z) threads
    args: object
    params: object
    resolve: object = None
    shared: int = 0         # bytes of dynamic shared memory (at most 48 KiB: no opt-in attribute is set)
    pdl: bool = False       # launched with programmatic stream serialization (kernels start with grid_dependency())
    config: tuple | None = None     # (stream, its CUlaunchConfig) of a pdl launch, made at the first launch

    def __call__(self, stream: Stream):
        if self.function is None:
            self.function = self.resolve()
        if self.pdl:
            if self.config is None or self.config[0] is not stream:     # made once per stream, not per launch
                self.config = (stream, self._config(stream))
            check(driver.cuLaunchKernelEx(self.config[1], self.function, ctypes.addressof(self.params), 0),
                  f"cuLaunchKernelEx({self.name})")
            return
        check(driver.cuLaunchKernel(self.function, *self.grid, *self.block, self.shared, stream.handle,
                                    ctypes.addressof(self.params), 0), f"cuLaunchKernel({self.name})")

    def _config(self, stream: Stream):
        """The CUlaunchConfig of a programmatic dependent launch on `stream`: this kernel may start while the one
        before it runs; its grid_dependency() waits for that one's end before touching memory."""
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self.block
        config.sharedMemBytes, config.hStream = self.shared, stream.handle
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs, config.numAttrs = [attr], 1
        return config
