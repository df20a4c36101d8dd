"""Measure a node's implementations once and keep the fastest per shape (CPUBackend(autotune=True)).

A node is keyed by its op, type, shape and parameters, its sources' types, shapes and strides, the thread
count and the scratch budget. On the first miss every implementation that can run the node is bound to
fresh arrays of the same shapes and strides filled with random values (never the graph's buffers) with its
own temp block, called once to warm up and timed on one call; the fastest is kept in the winners cache both
backends share (ggpy/backends/winners.py: one JSON file per machine type, CPU model and numba version).
"""
from __future__ import annotations

import hashlib
import platform
import time

import numba
import numpy as np

from ..winners import Winners
from .buffer import storage_dtype
from .kernels.blas import single_threaded_blas
from .registry import BoundNode


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def _machine() -> str:
    """This machine's cache file: machine type, CPU model and numba version."""
    device = f"{platform.machine()} {_cpu_model()} numba {numba.__version__}"
    return f"cpu-{hashlib.sha1(device.encode()).hexdigest()[:16]}"


WINNERS = Winners(_machine())


def shape_key(node, backend) -> tuple:
    srcs = tuple(None if s is None else (s.type.name, tuple(s.ne), tuple(s.nb)) for s in node.src)
    return (node.op, node.type.name, tuple(node.ne), tuple(sorted(node.op_params.items())), srcs,
            backend.n_threads, backend.scratch_budget)


def random_view(t, rng) -> np.ndarray:
    """An array shaped and strided like tensor t's kernel view (reversed ne and nb; a quantized type's rows as
    bytes), random values."""
    dtype = storage_dtype(t.type)
    count = -(-max(t.nbytes, t.type.size) // dtype.itemsize)
    if t.type.dtype == np.float16:
        flat = rng.standard_normal(count).astype(np.float16).view(np.uint16)
    elif np.issubdtype(dtype, np.integer):
        flat = rng.integers(0, 2, count).astype(dtype)
    else:
        flat = rng.standard_normal(count).astype(dtype)
    return np.lib.stride_tricks.as_strided(flat, t.storage_shape, t.storage_strides)


def seconds(entry, node, impl, backend, rng, best: float) -> float:
    """One timed call of `impl` on random arrays like node's after a warm-up call, or the warm-up call's time
    when that is already more than twice `best`."""
    temp_bytes = entry.scratch(node, impl, backend)
    bound = BoundNode(node, random_view(node, rng), [None if s is None else random_view(s, rng) for s in node.src],
                      np.zeros(temp_bytes, np.uint8) if temp_bytes else None, backend.n_threads, impl, backend)
    run = entry.bind(bound)
    if run is None:
        return 0.0
    backend._set_threads()
    with single_threaded_blas():
        t0 = time.perf_counter()
        run()
        first = time.perf_counter() - t0
        if first > 2 * best:
            return first
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0


def measure_impls(entry, node, impls, backend) -> list:
    """[the fastest of `impls` on node's shapes, {implementation: seconds}]."""
    rng, times = np.random.default_rng(0), {}
    for impl in impls:
        times[impl] = seconds(entry, node, impl, backend, rng, min(times.values(), default=np.inf))
    return [min(times, key=times.get), times]
