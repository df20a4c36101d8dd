"""The compiled kernels of one device: a Module (a loaded cubin) per Source (a kernels/*.cu file, or a plan's generated
kernels), compiled or read from the disk cache when a launch first needs it (compiler.py).

A launch names its kernel; the .cu file that defines it comes from sources.source_of. Launches made inside `batch()`
(a plan's program being made) get their functions when it ends, after every source they need compiles at once, in
parallel: a plan compiles only the families its nodes use. A launch made outside one gets its function at once.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from .compiler import compile_many
from .driver import check, driver
from .sources import Source, source_of

PORTABLE_CLUSTER = 8
"""Blocks a cluster may have on every GPU; a kernel whose __cluster_dims__ ask more (16 on an H100 / H200) is allowed
them when loaded."""


class Module:
    """A loaded cubin (in the current context) whose kernels `function(name)` returns."""

    def __init__(self, cubin: bytes):
        image = np.frombuffer(cubin, dtype=np.uint8)
        self.handle = check(driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
        self._functions = {}

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            fn = check(driver.cuModuleGetFunction(self.handle, name.encode()), f"cuModuleGetFunction({name})")
            attr = driver.CUfunction_attribute
            if check(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, fn), name) > PORTABLE_CLUSTER:
                check(driver.cuFuncSetAttribute(fn, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), name)
            self._functions[name] = fn
        return fn


class Modules:
    """The modules of `device`, by Source, loaded when first needed."""

    def __init__(self, device):
        self.device = device
        self.loaded: dict[Source, Module] = {}
        self._pending = None        # [(launch, source)] waiting for the end of a batch

    def load(self, sources):
        """Compile (in parallel) and load the sources not loaded yet."""
        missing = list(dict.fromkeys(s for s in sources if s not in self.loaded))
        if missing:
            cubins = compile_many(missing, self.device.arch)
            self.device.activate()
            for src, cubin in zip(missing, cubins):
                self.loaded[src] = Module(cubin)

    def function(self, name: str, source: Source | None = None):
        """Kernel `name` of `source` (default: the .cu file that defines it), compiling that first if needed."""
        source = source or source_of(name)
        self.load([source])
        return self.loaded[source].function(name)

    def bind(self, launch, source: Source | None = None):
        """Give `launch` its kernel function: now, or at the end of the current batch."""
        name = launch.name                  # the kernel's (callers may rename the step afterwards)
        source = source or source_of(name)
        if self._pending is None or source in self.loaded:
            launch.function = self.function(name, source)
        else:
            launch.resolve = lambda: self.function(name, source)
            self._pending.append((launch, source))

    @contextmanager
    def batch(self):
        """Launches bound meanwhile get their functions at the end, after their sources compile together."""
        if self._pending is not None:           # nested: the outer batch binds
            yield
            return
        self._pending = []
        try:
            yield
            pending = self._pending
        finally:
            self._pending = None
        self.load(source for _, source in pending)
        for launch, _ in pending:
            if launch.function is None:
                launch.function = launch.resolve()
