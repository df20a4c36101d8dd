"""NVRTC compilation of CUDA sources (sources.Source: a kernels/*.cu file, or a plan's generated kernels) for one
architecture, with an on-disk cache of the cubins. Sources include the headers of kernels/ (common.cuh, ops.cuh, ...)
through NVRTC's include path. compile_many compiles several at once, on threads (nvrtcCompileProgram releases the
GIL), with a progress line on stderr while anything compiles (nothing is printed when the disk cache has them all).

The cache key hashes the source, the headers, the options, the architecture and the NVRTC version, so a second
process loads the cubins from disk and compiles nothing. GGPY_CUDA_CACHE overrides the directory (default
~/.cache/ggpy/cuda). Only NVRTC is imported here, not the driver: sources compile on a machine without a GPU (CI).
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ...errors import CudaError
from .sources import KERNEL_DIR, Source

try:
    from cuda.bindings import nvrtc
except ImportError as e:        # cuda-python is the optional 'cuda' extra
    raise CudaError(f"the CUDA backend needs NVIDIA's cuda-python (pip install 'ggpy[cuda]'): {e}") from None

STATS = {"compiles": 0, "hits": 0}     # per process: how often NVRTC ran and how often the cache answered


def cache_dir() -> Path:
    return Path(os.environ.get("GGPY_CUDA_CACHE") or Path.home() / ".cache" / "ggpy" / "cuda")


def _check(result, call: str):
    """The values of an NVRTC result tuple (err, *values): None, the one value, or a tuple; CudaError when err is
    not success."""
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaError(f"{call} failed: {getattr(err, 'name', err)}")
    return None if not values else values[0] if len(values) == 1 else values


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    return tuple(_check(nvrtc.nvrtcVersion(), "nvrtcVersion"))


@functools.cache
def _headers() -> str:
    """Every header a source may include (part of the cache key: a changed header compiles again)."""
    return "".join(p.read_text() for p in sorted(KERNEL_DIR.glob("*.cuh")))


def _nvrtc(src: Source, arch: str) -> bytes:
    prog = _check(nvrtc.nvrtcCreateProgram(src.text.encode(), src.name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}", f"--include-path={KERNEL_DIR}", *src.options]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = b" " * _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise CudaError(f"nvrtcCompileProgram failed for {src.name} ({arch}): {getattr(err, 'name', err)}\n"
                            f"{log.decode(errors='replace').rstrip(chr(0))}")
        kind = "PTX" if arch.startswith("compute_") else "CUBIN"     # a virtual architecture: PTX, no ptxas
        out = b" " * _check(getattr(nvrtc, f"nvrtcGet{kind}Size")(prog), f"nvrtcGet{kind}Size")
        _check(getattr(nvrtc, f"nvrtcGet{kind}")(prog, out), f"nvrtcGet{kind}")
        return out
    finally:
        _check(nvrtc.nvrtcDestroyProgram(prog), "nvrtcDestroyProgram")


def _cache_path(src: Source, arch: str) -> Path:
    key = hashlib.sha256(repr((src.text, _headers(), tuple(src.options), arch, nvrtc_version())).encode())
    return cache_dir() / f"{Path(src.name).stem}-{arch}-{key.hexdigest()[:32]}.cubin"


def _store(path: Path, cubin: bytes):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{id(cubin)}.tmp")
        tmp.write_bytes(cubin)
        os.replace(tmp, path)           # atomic: a concurrent reader sees the whole file or none
    except OSError:
        pass                            # an unwritable cache only costs a compile next time


class _Progress:
    """The progress line on stderr: what is still compiling (rewritten in place on a terminal, a line per change
    otherwise)."""

    def __init__(self, arch: str, names: list):
        self.arch, self.left, self.total, self.start = arch, list(names), len(names), time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.show()

    def show(self):
        if self.left:
            line = (f"ggpy: compiling CUDA kernels for {self.arch} (once; cached in {cache_dir()}): {len(self.left)} of "
                    f"{self.total} left: {' '.join(self.left[:3])}{f' (+{len(self.left) - 3} more)' * (len(self.left) > 3)}")
        else:
            line = f"ggpy: compiled {self.total} CUDA kernel sources for {self.arch} in {time.perf_counter() - self.start:.1f} s"
        sys.stderr.write(("\r\033[K" + line + ("\n" if not self.left else "")) if self.tty else line + "\n")
        sys.stderr.flush()

    def done(self, name: str):
        self.left.remove(name)
        self.show()

    def failed(self):
        if self.tty:
            sys.stderr.write("\n")


def compile_many(sources: list, arch: str, workers: int | None = None) -> list[bytes]:
    """The cubins of `sources` (Source) for `arch` ('sm_90'; 'compute_90': PTX), in order: from the disk cache, else compiled (in
    parallel, `workers` threads, default one per core this process may use) and stored there."""
    paths = [_cache_path(s, arch) for s in sources]
    cubins = [p.read_bytes() if p.is_file() else None for p in paths]
    STATS["hits"] += sum(c is not None for c in cubins)
    todo = [i for i, c in enumerate(cubins) if c is None]
    if not todo:
        return cubins
    progress = _Progress(arch, [sources[i].name for i in todo])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=min(len(todo), workers or cores)) as pool:
        futures = {pool.submit(_nvrtc, sources[i], arch): i for i in todo}
        for future in as_completed(futures):
            i = futures[future]
            try:
                cubins[i] = future.result()
            except BaseException:               # a compile error: the ones not started yet are dropped
                progress.failed()
                pool.shutdown(cancel_futures=True)
                raise
            STATS["compiles"] += 1
            _store(paths[i], cubins[i])
            progress.done(sources[i].name)
    return cubins


def compile_cubin(source: str, arch: str, name: str = "ggpy", options: tuple = ()) -> bytes:
    """The cubin of one source text for `arch`: from the disk cache, else compiled and stored there."""
    return compile_many([Source(name, source, tuple(options))], arch)[0]
