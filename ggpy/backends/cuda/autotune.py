"""Measure the CUDA backend's choices once and keep the fastest (CUDABackend(autotune=True)).

Two choices are measured, each on scratch device memory of its own (never the graph's buffers): a GEMM's cuBLASLt algorithm (up to
CANDIDATES answers of the heuristic for the GEMM without its epilogue, timed as D = A B with the same layouts; the
fastest that also runs with the epilogue is kept, else the heuristic's first runs), and the implementation of a
node with several (conv_2d: kernels/conv.py). Every candidate gets a warm-up call, then ROUNDS rounds of REPS calls
timed with CUDA events, the candidates taking turns (none timed on a colder GPU than the others); its best round
counts. With CUDA graphs on, an implementation is timed as a replay of its captured launches (as its plan runs:
cuDNN's ~50 us of host work per call would otherwise count). Winners are kept in the winners cache both backends
share (ggpy/backends/winners.py: the file cuda.json), keyed by the device's name and compute capability, so a second
process measures nothing; a node's implementation is tuned by winners.tuned_impl. An algorithm is stored as its 64 bytes
(cuBLASLt documents cublasLtMatmulAlgo_t as serializable for one library version, which is in its key) and checked
with matmul_algo_check before use; failed candidates are stored as None (with CUDA graphs on, also an
implementation whose launches cannot be captured), and a GEMM with no usable candidate too (the heuristic's first
then runs without measuring again).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from ...errors import CudaError, OutOfMemoryError
from ...graph.tensor import Tensor
from ..winners import Winners
from . import cublas
from .device import Event
from .graphs import CapturedGraph

WINNERS = Winners("cuda")
"""key -> [winner (an implementation, an algorithm's hex bytes, or None), {candidate: seconds or None}]."""
MEASURE_ERRORS = (OutOfMemoryError, CudaError)      # no room or no algorithm to measure now: nothing kept
CANDIDATES = 8
ROUNDS, REPS = 3, 10


def _seconds(runs: dict, stream) -> dict:
    """{candidate: seconds per call of runs[candidate](stream)}, its best of ROUNDS rounds of REPS calls after a
    warm-up call, the candidates taking turns; None for one that fails."""
    times = dict.fromkeys(runs, math.inf)
    for r in range(ROUNDS + 1):                 # round 0 warms up
        for c, run in runs.items():
            if times[c] is None:
                continue
            try:
                start, end = Event(), Event()
                start.record(stream)
                for _ in range(REPS if r else 1):
                    run(stream)
                end.record(stream)
                if r:
                    times[c] = min(times[c], Event.elapsed(start, end) / REPS)
            except CudaError:
                times[c] = None
    return times


def _scratch(backend, size: int):
    """A device buffer of `size` bytes of its own, filled with 0x3c bytes (finite values in every float type)."""
    buf = backend.buffer_type.alloc_buffer(size)
    buf.fill(0, size, 0x3c)
    return buf


def _fastest(times: dict, ok=lambda c: True):
    """The fastest candidate that ran and passes ok(candidate), or None."""
    ran = sorted((t, c) for c, t in times.items() if t is not None)
    return next((c for _, c in ran if ok(c)), None)


# -- a node's implementation (conv_2d: implicit, im2col, direct or cudnn) -------------------------------------
def shape_key(node, backend) -> tuple:
    srcs = tuple(None if s is None else (s.type.name, tuple(s.ne), tuple(s.nb)) for s in node.src)
    return ("impl", backend.device.name, tuple(backend.device.cc), node.op, node.type.name, tuple(node.ne),
            tuple(node.nb), tuple(sorted(node.op_params.items())), srcs, bool(backend.allow_tf32))


def _scratch_tensor(t, backend) -> Tensor:
    """A tensor typed, shaped and strided like t in a scratch buffer of its own."""
    copy = Tensor(None, t.type, t.ne, t.nb, t.op, [], t.op_params)
    copy.name = f"{t.name} (autotune scratch)"
    copy.buffer = _scratch(backend, max(t.nbytes, t.type.size))
    return copy


def measure_impls(entry, node, impls, backend) -> list:
    """[the fastest of `impls` on scratch tensors like node's, {implementation: seconds or None}]."""
    backend.device.activate()
    shadow = _scratch_tensor(node, backend)
    shadow.src = [None if s is None else _scratch_tensor(s, backend) for s in node.src]
    runs, temps = {}, []            # every candidate's temp block stays allocated until all are timed
    for impl in impls:
        size = entry.scratch(node, impl, backend)
        temps.append(_scratch(backend, size))
        shadow.temp = (temps[-1], 0, size)
        steps = entry.steps(backend, shadow, impl)
        runs[impl] = lambda stream, steps=steps: [step(stream) for step in steps]
    if backend.graphs:              # timed as the plan will run: replayed, without the host's cost per launch
        runs = {c: r for c, r in ((c, _replayed(r, backend.stream)) for c, r in runs.items()) if r is not None}
    times = dict.fromkeys(impls) | _seconds(runs, backend.stream)
    return [_fastest(times), times]


def _replayed(run, stream):
    """run(stream) as one CUDA graph replay (after a plain call that loads its kernels), or None when its launches
    cannot be captured (some cuDNN engines): a candidate that would break its plan's CUDA graph is not one."""
    try:
        run(stream)
        graph = CapturedGraph([run], stream)
    except CudaError:
        return None
    return lambda s: graph.launch()


# -- a GEMM's cuBLASLt algorithm --------------------------------------------------------------------------------
def _get(getter, dtype_of, obj: int, attr) -> int:
    buf, written = np.zeros(1, dtype_of(attr)), np.zeros(1, np.uint64)
    cublas.call(getter, obj, attr, buf.ctypes.data, buf.nbytes, written.ctypes.data)
    return int(buf[0])


def gemm_key(device, desc: int, layouts: tuple, pref: int) -> tuple:
    """The GEMM's key, read from its descriptors: compute and scale types, transposes, epilogue, each matrix's type,
    rows, cols, ld, batch and stride, the workspace and alignments; the device and the cuBLASLt version."""
    lt = cublas.lt
    D, L, P = lt.MatmulDescAttribute, lt.MatrixLayoutAttribute, lt.MatmulPreferenceAttribute
    op = [_get(lt.matmul_desc_get_attribute, lt.get_matmul_desc_attribute_dtype, desc, a)
          for a in (D.COMPUTE_TYPE, D.SCALE_TYPE, D.TRANSA, D.TRANSB, D.EPILOGUE, D.BIAS_DATA_TYPE)]
    mats = [tuple(_get(lt.matrix_layout_get_attribute, lt.get_matrix_layout_attribute_dtype, lay, a)
                  for a in (L.TYPE, L.ORDER, L.ROWS, L.COLS, L.LD, L.BATCH_COUNT, L.STRIDED_BATCH_OFFSET))
            for lay in layouts]
    prefs = [_get(lt.matmul_preference_get_attribute, lt.get_matmul_preference_attribute_dtype, pref, a)
             for a in (P.MAX_WORKSPACE_BYTES, P.MIN_ALIGNMENT_A_BYTES, P.MIN_ALIGNMENT_B_BYTES,
                       P.MIN_ALIGNMENT_C_BYTES, P.MIN_ALIGNMENT_D_BYTES)]
    return ("gemm", device.name, tuple(device.cc), lt.get_version(), tuple(op), tuple(mats), tuple(prefs))


def _usable(h: int, desc: int, layouts: tuple, algo_ptr: int) -> bool:
    """Whether cuBLASLt runs the algorithm at algo_ptr for this GEMM within the workspace."""
    result = cublas.lt.MatmulHeuristicResult(1)
    try:
        cublas.call(cublas.lt.matmul_algo_check, h, desc, *layouts, algo_ptr, result.ptr)
    except CudaError:
        return False
    return int(result.workspace_size) <= cublas.WORKSPACE


def _nbytes(key_mat: tuple) -> int:
    """Bytes a column-major matrix of the key (type, order, rows, cols, ld, batch, stride) spans."""
    type_, _, rows, cols, ld, batch, stride = key_mat
    size = {v: t.size for t, v in cublas.DATA_TYPE.items()}.get(type_, 4)       # 4: the widest type here
    return size * (ld * (cols - 1) + rows + (batch - 1) * stride)


def _measure_gemm(backend, h: int, desc: int, layouts: tuple, pref: int, key: tuple) -> list:
    """Time up to CANDIDATES of the heuristic's algorithms for D = A B (desc without its epilogue, beta 0, C = D) on
    scratch matrices: [the fastest that runs with desc (its epilogue, C) too, or None; {index: seconds}]."""
    lt, call = cublas.lt, cublas.call
    compute, scale, ta, tb = key[4][:4]
    plain = call(lt.matmul_desc_create, compute, scale)
    found = lt.MatmulHeuristicResult(CANDIDATES)
    try:
        for attr, v in ((lt.MatmulDescAttribute.TRANSA, ta), (lt.MatmulDescAttribute.TRANSB, tb)):
            cublas._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, plain, attr, v)
        (la, lb, _, ld), (ka, kb, _, kd) = layouts, key[5]
        n = cublas.heuristic(h, plain, (la, lb, ld, ld), pref, found, CANDIDATES)
        algos = [found.ptr + i * lt.matmul_heuristic_result_dtype.itemsize for i in range(n)]
        a, b, d, work = (_scratch(backend, size) for size in (_nbytes(ka), _nbytes(kb), _nbytes(kd), cublas.WORKSPACE))
        alpha_beta = np.array([1, 0], np.float32)

        def gemm(algo):
            return lambda stream: call(lt.matmul, h, plain, alpha_beta.ctypes.data, a.ptr, la, b.ptr, lb,
                                       alpha_beta.ctypes.data + 4, d.ptr, ld, d.ptr, ld, algo, work.ptr,
                                       cublas.WORKSPACE, int(stream.handle))
        times = _seconds({str(i): gemm(algo) for i, algo in enumerate(algos)}, backend.stream)
    finally:
        lt.matmul_desc_destroy(plain)
    best = _fastest(times, lambda i: _usable(h, desc, layouts, algos[int(i)]))
    return [None if best is None else ctypes.string_at(algos[int(best)], lt.matmul_algo_dtype.itemsize).hex(), times]


def gemm_algo(backend, desc: int, layouts: tuple, pref: int, algo_ptr: int) -> bool:
    """Write the measured algorithm of the GEMM (desc, its (A, B, C, D) layouts, pref) at algo_ptr (a
    cublasLtMatmulAlgo_t); False when there is none to use (the caller takes the heuristic's first)."""
    backend.device.activate()
    h = cublas.handle(backend.device)
    key = gemm_key(backend.device, desc, layouts, pref)
    winner = WINNERS.lookup(key, lambda: _measure_gemm(backend, h, desc, layouts, pref, key), MEASURE_ERRORS)[0]
    size = cublas.lt.matmul_algo_dtype.itemsize
    try:
        algo = bytes.fromhex(winner or "")
    except ValueError:
        return False
    if len(algo) != size:
        return False
    ctypes.memmove(algo_ptr, algo, size)
    return _usable(h, desc, layouts, algo_ptr)
