"""Measure a node's implementations once and keep the fastest per shape (CPUBackend(autotune=True)).

A node is keyed by its op, type, shape and parameters, its sources' types, shapes and strides, the thread
count and the scratch budget. On the first miss every implementation that can run the node is bound to
fresh arrays of the same shapes and strides filled with random values (never the graph's buffers) with its
own temp block, called once to warm up and timed on one call; the fastest is kept, in the process and on disk
(`$GGPY_AUTOTUNE_CACHE`, default ~/.cache/ggpy/autotune: one JSON file per machine type, CPU model and numba
version), so a second process measures nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np

from ...errors import UnsupportedOpError
from .buffer import storage_dtype
from .kernels.blas import single_threaded_blas
from .registry import BoundNode

WINNERS: dict = {}
"""shape key -> (winning implementation, {implementation: seconds})."""
STATS = {"measured": 0, "hits": 0, "disk_hits": 0}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def cache_path() -> Path:
    """The file the winners of this machine (machine type, CPU model, numba version) are kept in."""
    device = f"{platform.machine()} {_cpu_model()} numba {numba.__version__}"
    root = Path(os.environ.get("GGPY_AUTOTUNE_CACHE", Path.home() / ".cache" / "ggpy" / "autotune"))
    return root / f"cpu-{hashlib.sha1(device.encode()).hexdigest()[:16]}.json"


def _disk() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _save(key, value):
    """Add key's winner to the disk cache (read, merge, write to a temp file, rename: no torn file)."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = _disk()
        entries[repr(key)] = value
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, path)
    except OSError:
        pass                    # a read-only home: the winner stays in this process


def forget(key):
    """Drop key's winner from this process and from the disk cache (to measure it again)."""
    WINNERS.pop(key, None)
    entries = _disk()
    if entries.pop(repr(key), None) is not None:
        cache_path().write_text(json.dumps(entries))


def shape_key(node, backend) -> tuple:
    srcs = tuple(None if s is None else (s.type.name, tuple(s.ne), tuple(s.nb)) for s in node.src)
    return (node.op, node.type.name, tuple(node.ne), tuple(sorted(node.op_params.items())), srcs,
            backend.n_threads, backend.scratch_budget)


def candidates(entry, node, backend) -> list:
    """The implementations of `entry` that can run `node` (their temp_size accepts it)."""
    out = []
    for impl in entry.impls:
        try:
            if entry.temp_size is not None:
                entry.temp_size(node, impl, backend)
        except UnsupportedOpError:
            continue
        out.append(impl)
    return out


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
    temp_bytes = int(entry.temp_size(node, impl, backend)) if entry.temp_size is not None else 0
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


def tuned_impl(entry, node, backend) -> str | None:
    """The cached winner for node's shape key, measuring the candidates on a miss; None when fewer than two
    implementations can run it (the kernel's own choice then stands)."""
    key = shape_key(node, backend)
    hit = WINNERS.get(key)
    if hit is not None:
        STATS["hits"] += 1
        return hit[0]
    stored = _disk().get(repr(key))
    if stored is not None:
        STATS["disk_hits"] += 1
        WINNERS[key] = (stored[0], stored[1])
        return stored[0]
    impls = candidates(entry, node, backend)
    times = {}
    if len(impls) > 1:
        rng = np.random.default_rng(0)
        for impl in impls:
            times[impl] = seconds(entry, node, impl, backend, rng, min(times.values(), default=np.inf))
        STATS["measured"] += 1
    WINNERS[key] = (min(times, key=times.get) if times else None, times)
    _save(key, list(WINNERS[key]))
    return WINNERS[key][0]


def is_tuned(node, backend) -> bool:
    """Whether node's implementation was picked by measuring."""
    return WINNERS.get(shape_key(node, backend), (None,))[0] is not None
