"""NVRTC compilation of CUDA C for one architecture, with an on-disk cache of the cubins, and module loading.

The cache key hashes the source, the options, the architecture and the NVRTC version, so a second process
(or a second backend) loads the cubin from disk and compiles nothing. GGPY_CUDA_CACHE overrides the
directory (default ~/.cache/ggpy/cuda).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ...errors import CudaError
from .driver import check, driver, nvrtc

STATS = {"compiles": 0, "hits": 0}     # per process: how often NVRTC ran and how often the cache answered


def cache_dir() -> Path:
    return Path(os.environ.get("GGPY_CUDA_CACHE") or Path.home() / ".cache" / "ggpy" / "cuda")


def nvrtc_version() -> tuple[int, int]:
    return tuple(check(nvrtc.nvrtcVersion(), "nvrtcVersion"))


def _nvrtc(source: str, name: str, arch: str, options: tuple) -> bytes:
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in options]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise CudaError(f"nvrtcCompileProgram failed for {name} ({arch}): {getattr(err, 'name', err)}\n"
                            f"{log.decode(errors='replace').rstrip(chr(0))}")
        size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        check(nvrtc.nvrtcDestroyProgram(prog), "nvrtcDestroyProgram")


def compile_cubin(source: str, arch: str, name: str = "ggpy", options: tuple = ()) -> bytes:
    """The cubin of `source` for `arch` ('sm_90'): from the disk cache, else compiled and stored there."""
    key = hashlib.sha256(repr((source, tuple(options), arch, nvrtc_version())).encode()).hexdigest()[:32]
    path = cache_dir() / f"{name}-{arch}-{key}.cubin"
    if path.is_file():
        STATS["hits"] += 1
        return path.read_bytes()
    cubin = _nvrtc(source, name, arch, tuple(options))
    STATS["compiles"] += 1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(cubin)
        os.replace(tmp, path)           # atomic: a concurrent reader sees the whole file or none
    except OSError:
        pass                            # an unwritable cache only costs a compile next time
    return cubin


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
            self._functions[name] = fn
        return fn
