"""Shared helpers of the allocator tests, the tests' own numba cache, and pytest-xdist's settings.

The tests compile the CPU kernels into a numba cache of their own (GGPY_NUMBA_CACHE=~/.cache/ggpy/numba-tests), away
from a developer's; the runtime keys the folder in it by the kernels' sources (ggpy/backends/cpu/numba_cache.py),
and the folders of older keys are removed here (set GGPY_NUMBA_CACHE or NUMBA_CACHE_DIR to override).

README's command runs the tests in pytest-xdist workers (`-n auto`), which share that cache: numba's
save (index, then a data file named by the first free number) lets two processes saving signatures of one function
at once give one signature's index entry the other's code, so saves take a lock on the function's index file here.
`-n auto` is one worker per core, at most 4 (each holds numba, LLVM and torch; its kernels use every core).
The pytest-xdist workers already keep the cores busy, so each compiles a program's new kernels in its cores' share
of compile processes (GGPY_COMPILE_WORKERS: 1 with a worker per core), not one per core: a compile process costs a
start of numba and ggpy and a reload of what it compiled, for no parallelism the cores have left (on 2 cores, `-n auto`
on the flash_attn_ext and mul_mat_id cases of test_backend_ops: 188 s instead of 212 s cold). test_precompile and
test_kernel_cache set their own.
With more than one worker, their kernels' OpenMP threads (numba's threading layer) sleep when a parallel loop ends
(OMP_WAIT_POLICY=passive) instead of spinning on a core another worker's threads need (on 2 cores, `-n auto` on
test_mobilesam_encoder, test_llama_kv_types and test_mobilesam_cli: 137 s instead of 152 s cold). The thread counts
the tests ask for are unchanged.

`verify_placement` re-derives, from the graph alone, when every tensor is live and checks the bytes the
allocator actually gave each tensor and temp block (tensor.buffer/offset, node.temp) against it. It does
not use the planner's Block list or Plan.check_overlap, so it is an independent check of the planner.
"""
from __future__ import annotations

import fcntl
import math
import os
import shutil
from pathlib import Path


_TEST_NUMBA_CACHE = Path.home() / ".cache" / "ggpy" / "numba-tests"
os.environ.setdefault("GGPY_NUMBA_CACHE", str(_TEST_NUMBA_CACHE))
os.environ.setdefault("GGPY_AUTOTUNE_CACHE", str(Path.home() / ".cache" / "ggpy" / "autotune-tests"))
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):     # set by pytest-xdist in its workers, before this file is read
    os.environ.setdefault("GGPY_COMPILE_WORKERS",
                          str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))
    if int(os.environ["PYTEST_XDIST_WORKER_COUNT"]) > 1:
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")   # read when numba's OpenMP layer loads, on a first kernel

import pytest  # noqa: E402 - the runtime reads GGPY_NUMBA_CACHE when ggpy imports its kernels

import ggpy  # noqa: E402
from ggpy.backends.cpu import numba_cache  # noqa: E402
from numba.core.caching import IndexDataCacheFile  # noqa: E402

if Path(os.environ["GGPY_NUMBA_CACHE"]) == _TEST_NUMBA_CACHE and _TEST_NUMBA_CACHE.is_dir():
    for _old in _TEST_NUMBA_CACHE.iterdir():       # the tests' own cache: other keys are stale sources' entries
        if _old.name != numba_cache.key():
            shutil.rmtree(_old, ignore_errors=True)


def _locked(save):
    def locked_save(self, key, data):
        """numba's IndexDataCacheFile.save (read the index, add key, write it, write the data) under an exclusive
        lock on `<index>.lock`: one process at a time picks a data file's name."""
        fd = os.open(self._index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            save(self, key, data)
        finally:
            os.close(fd)            # releases the lock
    return locked_save


IndexDataCacheFile.save = _locked(IndexDataCacheFile.save)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per core this process may use, at most 4."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


# Ops whose output may legitimately take over a source's bytes (elementwise, same layout).
INPLACE_OK = frozenset(("add", "sub", "mul", "div", "scale", "clamp", "leaky_relu") + tuple(ggpy.UNARY_OPS))


def _base(t):
    return t.view_src if t.view_src is not None else t


def liveness(graph):
    """(first, last) step of every tensor that owns memory, keyed by id: leafs are born at -1; outputs,
    leafs, inputs and bases of output views live forever; a view's consumers keep its base alive."""
    first, last = {}, {}
    for t in graph.leafs:
        first[id(t)] = -1
        last[id(t)] = math.inf
    for i, node in enumerate(graph.nodes):
        if node.view_src is None:
            first[id(node)] = i
            last.setdefault(id(node), i)
        for s in node.src:
            if s is not None:
                b = _base(s)
                last[id(b)] = max(last.get(id(b), -1), i)
        if node.view_src is not None:
            b = node.view_src
            last[id(b)] = max(last.get(id(b), -1), i)
    for t in graph.leafs + graph.nodes:
        if t.is_output or t.is_input:
            last[id(_base(t))] = math.inf
    return first, last


def _legal_inplace(t, u, step_of, last) -> bool:
    """u took over t's bytes: u is an elementwise node reading t directly, u is t's last reader (directly or
    through views; earlier readers are done), u reads no view of t, t is neither a leaf, an input nor an
    output, and t has u's exact layout and offset."""
    return (u.op in INPLACE_OK and any(s is t for s in u.src)
            and not any(s is not None and s.view_src is t for s in u.src)
            and t.op is not None and not t.is_output and not t.is_input
            and last[id(t)] == step_of[id(u)] and t.type == u.type and t.ne == u.ne and t.nb == u.nb
            and t.offset == u.offset)


def verify_placement(graph, alloc, temps_expected: dict | None = None):
    """Assert that the placement `alloc` applied to `graph` is sound; returns (first, last) liveness.

    - every tensor has memory; owned tensors lie inside one of alloc.buffers, aligned to the buffer type;
    - a view's bytes are its base's bytes at view_offs (views own nothing);
    - two owned tensors live at the same step never share a byte, except a legal in-place take-over;
    - node i's temp block (node.temp) shares no byte with any tensor live at step i;
    - temps_expected (node index -> bytes), when given, is exactly what each node got.
    """
    tensors = graph.leafs + graph.nodes
    step_of = {id(t): -1 for t in graph.leafs}
    step_of.update({id(t): i for i, t in enumerate(graph.nodes)})
    first, last = liveness(graph)
    buffers = {id(b): k for k, b in enumerate(alloc.buffers)}
    align = alloc.backend.buffer_type.alignment
    owned = []
    for t in tensors:
        assert t.buffer is not None, f"{t!r} has no buffer after alloc_graph"
        if t.view_src is not None:
            base = t.view_src
            assert t.buffer is base.buffer and t.offset == base.offset + t.view_offs, \
                f"view {t!r} is not placed at its base's bytes + view_offs"
            continue
        assert id(t.buffer) in buffers, f"{t!r} is not in one of the allocator's buffers"
        assert t.offset % align == 0, f"{t!r} at offset {t.offset} is not {align}-aligned"
        assert 0 <= t.offset and t.offset + t.nbytes <= t.buffer.size, f"{t!r} runs past its buffer"
        owned.append(t)

    def live_together(t, u) -> bool:
        return first[id(t)] <= last[id(u)] and first[id(u)] <= last[id(t)]

    def share_bytes(t, u) -> bool:
        return (t.buffer is u.buffer and t.offset < u.offset + max(u.nbytes, 1)
                and u.offset < t.offset + max(t.nbytes, 1))

    for a_i, t in enumerate(owned):
        for u in owned[a_i + 1:]:
            if share_bytes(t, u) and live_together(t, u):
                ok = _legal_inplace(t, u, step_of, last) or _legal_inplace(u, t, step_of, last)
                assert ok, (f"{t!r} live {first[id(t)]}..{last[id(t)]} at {t.offset} and {u!r} live "
                            f"{first[id(u)]}..{last[id(u)]} at {u.offset} share bytes")

    for i, node in enumerate(graph.nodes):
        if temps_expected is not None:
            want = temps_expected.get(i, 0)
            if want:
                assert node.temp is not None and node.temp[2] == want, f"node {i} ({node.op}) temp {node.temp}"
            else:
                assert node.temp is None, f"node {i} ({node.op}) got an unrequested temp {node.temp}"
        if node.temp is None:
            continue
        buf, off, size = node.temp
        assert id(buf) in buffers and off % align == 0 and off + size <= buf.size
        for t in owned:
            if first[id(t)] <= i <= last[id(t)] and t.buffer is buf:
                assert not (off < t.offset + max(t.nbytes, 1) and t.offset < off + size), \
                    f"temp of node {i} ({node.op}) [{off}, {off + size}) overlaps live {t!r} at {t.offset}"
    return first, last


@pytest.fixture(scope="session")
def placement_checker():
    """The independent placement check, as a fixture (session scoped: safe inside hypothesis tests)."""
    return verify_placement


@pytest.fixture(scope="module")
def cuda_backend():
    """The CUDA backend (cuda:0, default options), made once per test module; skips the test where no GPU can be
    used here (no cuda-python, no driver, no device). A test needing other options builds
    `CUDABackend("cuda", ...)` after asking for this fixture."""
    pytest.importorskip("cuda.bindings.driver")
    try:
        return ggpy.backends.make_backend("cuda")
    except ggpy.CudaError as e:
        pytest.skip(f"no usable GPU: {e}")
