"""flash_attn_ext on CUDA (attention_flash.cuh; the entry, with its refusal, is kernels/attention.py's), three
implementations:

`vec` (fa_vec_d{D}_r{RB}_{K type}_{V type}[_cl]): a block of VEC_WARPS warps takes RB (query head, query row) pairs of
one KV head's group, so the group's query heads read each key once, and a chunk of the keys (a multiple of the keys
it takes at once; chunks over blockIdx.x). On sm_90 with K and V of one type and at most CLUSTER_MAX_KEYS keys,
CLUSTER chunks form a cluster (_cl) merged in its blocks' shared memory; else enough chunks that about TARGET_BLOCKS
blocks run (MIN_CHUNK keys a lane group at least, MAX_CHUNKS chunks at most), every block writing its partial (max,
sum, Dv accumulator) into the temp block and the last block of the chunks to finish merging them (one launch: an
arrival counter per block of pairs in memory of the backend's, zero between kernels), else (over COUNTERS)
fa_combine_d{D}.
F32 math on F32, F16 or Q8_0 K and V (any pair).
`tc` (fa_mma_d{D}_{K type}_{V type}, attention_fa_mma.cuh): F16 or Q8_0 K and V on tensor cores for prompt chunks, a
warp per 16 (query head, row) pairs of one KV head's group, the keys split in chunks (tc_split) merged by
fa_combine_d{D}; q is rounded to F16 after scaling, Q8_0 values, P and the mask to F16, accumulation in F32.
`dec` (fa_dec_d64_f16_f16, attention_fa_dec.cuh): F16 K and V (rows 16-byte aligned, heads DEC_DIMS) for a generated
token on tensor cores: a block of DEC_WARPS warps takes DEC_ROWS pairs of one KV head's group and a chunk of the keys, a
warp 16 keys a step (dec_split), its fragments loaded straight from the cache; merged as vec's (on sm_90 a cluster of
8 or 16 chunks up to the keys DEC_CLUSTERS says, the kernels' suffixes DEC_SUFFIX); rounding as tc's.
choose: tc for TC_TYPES K and V and at least TC_MIN_N query rows, else dec where it fits, but for groups of at most
SMALL_GROUP query heads a KV head over keys vec clusters (H200, benchmarks/cuda_decode_ops.py: SmolLM2's 9/3 heads
at 256 / 1536 keys vec 3.51 / 5.18 us, dec 4.38 / 7.02; at 4096 vec 8.05, dec 7.62; the 1B's 32/8 at 256 / 576 /
4096 dec 4.84 / 5.38 / 9.90, vec 5.10 / 6.23 / 10.77), else vec. Head dims HEAD_DIMS with D == Dv; others
refused. Heads of 256 (Gemma-2/3): vec takes at most MAX_ROWS[256] pairs a block, tc tiles of 32 keys.
"""
from __future__ import annotations

import ctypes
import math

from ....errors import UnsupportedOpError
from ....types import F16, F32, Q8_0
from .common import SUFFIX, tensor_ptr

HEAD_DIMS = (64, 128, 256)
KV_TYPES = (F32, F16, Q8_0)     # K's and V's types (any pair)
TC_TYPES = (F16, Q8_0)          # K's and V's types of the tensor-core kernel (F32 stays exact on vec)
DEC_DIMS, DEC_WARPS, DEC_ROWS = (64,), 8, 8     # fa_dec_k's head dims, warps (FA_DEC_WARPS), pairs a block (FA_DEC_RB)
DEC_MAX_CHUNKS = 32             # fa_dec_k: chunks at most (FA_MAXC)
DEC_CLUSTERS = ((2048, 8), (8192, 16))  # fa_dec_k on sm_90: (keys at most, chunks of a cluster), the first that fits (H200,
                                # cuda_decode_ops.py: SmolLM2's 9/3 heads at 4224 keys 7.80 us in 32 chunks through
                                # memory, 6.99 in a cluster of 16, 8.29 of 8; the 1B's 32/8 at 1536 keys 7.01, 6.65, 6.15)
DEC_SUFFIX = {1: "", 8: "_cl", 16: "_cl16"}     # fa_dec_k's kernels by chunks of a cluster (1: none)
ROWS = (1, 2, 4, 8)             # (query head, row) pairs per block of fa_vec_k (RB)
MAX_ROWS = {64: 8, 128: 8, 256: 4}     # RB at most per head dim (its 8 warps' accumulators: 48 KB of static shared)
ONE_ROW_RB = 2                  # RB at most for one query row (a generated token): more blocks, each key read by more
                                # of them, yet faster (H200, benchmarks/cuda_decode_ops.py --rows 2: SmolLM2 heads 6.4 ->
                                # 4.7 us at 576 keys, 10.3 -> 8.6 at 4096; Gemma-3's 26.4 -> 13.8 at 4096)
SMALL_GROUP = 3                 # a KV head read by at most this many query heads: one pair a block for a generated token
                                # (SmolLM2's 3, cuda_decode_ops.py --rows 1: 3.95 -> 3.39 us at 256 keys, 8.64 -> 7.93 at
                                # 4096; the 1B's 4 at 4096 keys 10.7 -> 15.4: fewer, longer chunks)
WARPS = 4                       # warps per block of fa_mma_k (FA_MMA_WARPS in the .cuh)
VEC_WARPS = 8                   # fa_vec_k's warps (FA_WARPS): two blocks an SM for RB up to 4, a cluster's one
MIN_CHUNK, MAX_CHUNKS = 4, 32   # fa_vec_k: keys a lane group takes at least, chunks at most (FA_MAXC in the .cuh)
TARGET_BLOCKS = 264             # about two blocks per SM of an H100 / H200
TC_MIN_N = 16                   # query rows from which F16 K/V run on tensor cores
TC_ROWS = 16 * WARPS            # (query head, row) pairs per block of fa_mma_k
TC_TARGET, TC_MIN_CHUNK = {64: 792, 128: 264, 256: 264}, 256   # fa_mma_k: blocks per head dim (H200), keys per chunk at least
CLUSTER = 8                     # fa_vec_k on sm_90: blocks of a cluster (FA_CL)
CLUSTER_MAX_KEYS = {64: 1536, 128: 768, 256: 384}     # keys a cluster takes at most (6 a lane group: 3 passes)
COUNTERS = 1 << 12              # fa_vec_k's per-backend counters: a launch of more (blockIdx.y, z) runs fa_combine
ALIGN = {F32: 16, F16: 8, Q8_0: 2}     # bytes K's and V's rows are aligned to (vector loads)
_I64_3 = ctypes.c_int64 * 3


class FaArgs(ctypes.Structure):
    """The C `struct FaArgs` of attention_flash.cuh."""
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("mask", ctypes.c_void_p),
                ("dst", ctypes.c_void_p), ("part", ctypes.c_void_p), ("qs", _I64_3), ("ks", _I64_3), ("vs", _I64_3),
                ("ms", _I64_3), ("ds", _I64_3), ("n", ctypes.c_int), ("nkv", ctypes.c_int), ("h", ctypes.c_int),
                ("hk", ctypes.c_int), ("sr", ctypes.c_int), ("mh", ctypes.c_int), ("mw", ctypes.c_int),
                ("mask_f16", ctypes.c_int), ("chunk", ctypes.c_int), ("nchunks", ctypes.c_int),
                ("scale", ctypes.c_float), ("softcap", ctypes.c_float), ("m0", ctypes.c_float), ("m1", ctypes.c_float),
                ("nlog2", ctypes.c_int), ("count", ctypes.c_void_p), ("q8", ctypes.c_int)]


def rows(d: int) -> tuple:
    """fa_vec_k's RB for head dim d."""
    return tuple(r for r in ROWS if r <= MAX_ROWS[d])


def _tc_fits(node) -> bool:
    q, k, v = node.src[:3]
    return k.type in TC_TYPES and v.type in TC_TYPES and all(s % 8 == 0 for s in q.nb[1:])


def _dec_fits(node) -> bool:
    q, k, v = node.src[:3]
    return (k.type == v.type == F16 and q.ne[0] in DEC_DIMS and q.ne[1] < TC_MIN_N
            and all(s % 16 == 0 for t in (k, v) for s in t.nb[1:]))


def choose(node, backend) -> str:
    if _tc_fits(node) and node.src[0].ne[1] >= TC_MIN_N:
        return "tc"
    q, k = node.src[:2]
    small = q.ne[2] // k.ne[2] <= SMALL_GROUP and clustered(node, backend)     # vec's one pair a block, clustered
    return "dec" if _dec_fits(node) and not small else "vec"


def accepts(node, impl: str, backend) -> bool:
    return impl == "vec" or (_tc_fits(node) if impl == "tc" else _dec_fits(node))


def clustered(node, backend) -> bool:
    """Whether fa_vec_k runs as clusters of CLUSTER chunks merged in shared memory (sm_90 on, K and V of one type, at
    most CLUSTER_MAX_KEYS keys): no partials in memory, no arrival counters."""
    k, v = node.src[1:3]
    cc = getattr(getattr(backend, "device", None), "cc", (0, 0))
    return cc >= (9, 0) and k.type == v.type and k.ne[1] <= CLUSTER_MAX_KEYS[k.ne[0]]


def split(node, backend=None) -> tuple[int, int, int, int]:
    """fa_vec_k's (RB, blocks of pairs per KV head, keys per chunk, chunks)."""
    q, k = node.src[:2]
    n, h, s = q.ne[1:]
    hk, nkv = k.ne[2], k.ne[1]
    pairs = h // hk * n
    cap = 1 if h // hk <= SMALL_GROUP else ONE_ROW_RB
    fit = [r for r in rows(q.ne[0]) if n > 1 or r <= cap]
    rb = next((r for r in fit if r >= pairs), fit[-1])
    z = _cdiv(pairs, rb)
    unit = VEC_WARPS * 32 * 8 // q.ne[0]      # keys a block takes one a lane group (of D / 8 lanes)
    want = max(1, min(_cdiv(TARGET_BLOCKS, hk * s * z), MAX_CHUNKS, _cdiv(nkv, MIN_CHUNK * unit)))
    if clustered(node, backend):
        want = CLUSTER
    chunk = _cdiv(_cdiv(nkv, want), unit) * unit
    return rb, z, chunk, CLUSTER if want == CLUSTER and clustered(node, backend) else _cdiv(nkv, chunk)


def tc_split(node) -> tuple[int, int, int]:
    """fa_mma_k's (blocks of TC_ROWS pairs per KV head, keys per chunk (a multiple of 64), chunks): as many chunks as
    keep to about TC_TARGET[D] blocks, of at least TC_MIN_CHUNK keys."""
    q, k = node.src[:2]
    z = _cdiv(q.ne[2] // k.ne[2] * q.ne[1], TC_ROWS)
    want = max(1, min(TC_TARGET[q.ne[0]] // (z * k.ne[2] * q.ne[3]), k.ne[1] // TC_MIN_CHUNK))
    chunk = _cdiv(_cdiv(k.ne[1], want), 64) * 64
    return z, chunk, _cdiv(k.ne[1], chunk)


def dec_cluster(node, backend) -> int:
    """fa_dec_k's chunks of a cluster: the first of DEC_CLUSTERS that takes the keys on sm_90, else 1 (none)."""
    cc = getattr(getattr(backend, "device", None), "cc", (0, 0))
    return next((cl for keys, cl in DEC_CLUSTERS if cc >= (9, 0) and node.src[1].ne[1] <= keys), 1)


def dec_split(node, backend=None) -> tuple[int, int, int]:
    """fa_dec_k's (blocks of DEC_ROWS pairs per KV head, keys per chunk, chunks): a cluster's equal chunks
    (dec_cluster), else 16 keys a warp while that keeps to DEC_MAX_CHUNKS chunks (at most 4096 keys), else as many
    more (multiples of 16) as do."""
    q, k = node.src[:2]
    z = _cdiv(q.ne[2] // k.ne[2] * q.ne[1], DEC_ROWS)
    cluster = dec_cluster(node, backend)
    if cluster > 1:
        return z, _cdiv(k.ne[1], cluster), cluster
    per_warp = _cdiv(_cdiv(k.ne[1], DEC_WARPS * DEC_MAX_CHUNKS), 16) * 16
    chunk = DEC_WARPS * per_warp
    return z, chunk, _cdiv(k.ne[1], chunk)


def _counters(backend) -> int:
    """The address of the backend's COUNTERS arrival counters of fa_vec_k (zeroed once; each kernel leaves them 0)."""
    if backend.fa_counters is None:
        backend.fa_counters = backend.buffer_type.alloc_buffer(COUNTERS * 4)
        backend.fa_counters.fill(0, COUNTERS * 4, 0)
    return backend.fa_counters.ptr


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def temp_size(node, impl: str, backend) -> int:
    """fa_vec_k's partials when the keys are split: (Dv + 2) floats per output row and chunk."""
    if not accepts(node, impl, backend):
        raise UnsupportedOpError(f"cuda: flash_attn_ext '{node.name}' cannot run as {impl}: tc takes F16 or Q8_0 K "
                                 "and V and q strides of 8 bytes")
    if impl == "dec":           # vec's too: steps falls back to it for cache pointers not 16-byte aligned
        own = 0 if dec_cluster(node, backend) > 1 else _partials(node, dec_split(node)[2])
        return max(own, temp_size(node, "vec", backend))
    chunks = tc_split(node)[2] if impl == "tc" else split(node, backend)[3]
    return 0 if impl == "vec" and clustered(node, backend) else _partials(node, chunks)


def _partials(node, chunks: int) -> int:
    """Bytes of the (max, sum, Dv accumulator) partials of `chunks` chunks per output row (none for one chunk)."""
    q, v = node.src[0], node.src[2]
    return 0 if chunks == 1 else q.ne[1] * q.ne[2] * q.ne[3] * chunks * (v.ne[0] + 2) * 4


def kernel_name(node, impl, backend=None) -> str:
    q, k, v = node.src[:3]
    types = f"{SUFFIX[k.type]}_{SUFFIX[v.type]}"
    if impl == "tc":
        return f"fa_mma_d{q.ne[0]}_{types}"
    if impl == "dec":
        return f"fa_dec_d{q.ne[0]}_{types}" + DEC_SUFFIX[dec_cluster(node, backend)]
    return f"fa_vec_d{q.ne[0]}_r{split(node)[0]}_{types}" + ("_cl" if clustered(node, backend) else "")


def kernel_names() -> set:
    """Every kernel this module launches (for the sources test)."""
    names = {f"fa_vec_d{d}_r{r}_{SUFFIX[k]}_{SUFFIX[v]}" for d in HEAD_DIMS for r in rows(d) for k in KV_TYPES
             for v in KV_TYPES}
    names |= {f"fa_vec_d{d}_r{r}_{SUFFIX[t]}_{SUFFIX[t]}_cl" for d in HEAD_DIMS for r in rows(d) for t in KV_TYPES}
    names |= {f"fa_mma_d{d}_{SUFFIX[k]}_{SUFFIX[v]}" for d in HEAD_DIMS for k in TC_TYPES for v in TC_TYPES}
    names |= {f"fa_dec_d{d}_f16_f16{cl}" for d in DEC_DIMS for cl in DEC_SUFFIX.values()}
    return names | {f"fa_combine_d{d}" for d in HEAD_DIMS}


def _args(node) -> FaArgs:
    q, k, v = node.src[:3]
    mask = node.src[3] if len(node.src) > 3 else None
    p = node.op_params
    n, h, s = q.ne[1:]
    a = FaArgs(q=tensor_ptr(q), k=tensor_ptr(k), v=tensor_ptr(v), dst=tensor_ptr(node), n=n, nkv=k.ne[1], h=h,
               hk=k.ne[2], sr=s // k.ne[3], mh=1, mw=1, scale=p["scale"], softcap=p["logit_softcap"], m0=1.0, m1=1.0,
               nlog2=h, qs=_I64_3(*q.nb[1:]), ks=_I64_3(*k.nb[1:]), vs=_I64_3(*v.nb[1:]), ds=_I64_3(*node.nb[1:]))
    if mask is not None:
        a.mask, a.ms, a.mh, a.mw, a.mask_f16 = tensor_ptr(mask), _I64_3(*mask.nb[1:]), mask.ne[2], mask.ne[3], \
            int(mask.type == F16)
    if p["max_bias"] > 0:
        a.nlog2 = 2 ** int(math.floor(math.log2(h)))
        a.m0, a.m1 = 2.0 ** (-p["max_bias"] / a.nlog2), 2.0 ** (-(p["max_bias"] / 2.0) / a.nlog2)
    return a


def _runs(node, impl: str) -> str:
    """The implementation steps() launches: dec falls back to vec for cache pointers not 16-byte aligned."""
    return "vec" if impl == "dec" and any(tensor_ptr(t) % 16 for t in node.src[1:3]) else impl


def merged_in_cluster(node, impl: str, backend) -> bool:
    """Whether the chunks merge in one cluster's shared memory (fa_finish's CL > 1: one launch, no partials)."""
    impl = _runs(node, impl)
    return impl == "vec" and clustered(node, backend) or impl == "dec" and dec_cluster(node, backend) > 1


def writes_q8(node, impl: str, backend) -> bool:
    """Whether the kernel can write its output as the q8_1 blocks of a mat-vec's activations (kernels/handoff.py):
    one query row of one sequence, merged in a cluster, Dv a multiple of 32, a contiguous F32 output."""
    q, v = node.src[0], node.src[2]
    return (q.ne[1] == 1 and q.ne[3] == 1 and v.ne[0] % 32 == 0 and node.type == F32 and node.is_contiguous()
            and merged_in_cluster(node, impl, backend))


def steps(backend, node, impl: str) -> list:
    q, k, v = node.src[:3]
    impl = _runs(node, impl)
    if any(tensor_ptr(t) % ALIGN[t.type] for t in (k, v)) or tensor_ptr(q) % (8 if impl == "tc" else 4):
        raise UnsupportedOpError(f"cuda: flash_attn_ext '{node.name}': q, K or V not aligned in memory (K and V rows "
                                 f"to {ALIGN[k.type]} and {ALIGN[v.type]} bytes)")
    a = _args(node)
    n, h, s = q.ne[1:]
    block = (32 * {"tc": WARPS, "dec": DEC_WARPS, "vec": VEC_WARPS}[impl], 1, 1)
    z, a.chunk, a.nchunks = (tc_split(node) if impl == "tc" else dec_split(node, backend) if impl == "dec"
                             else split(node, backend)[1:])
    grid = (z * a.nchunks, k.ne[2], s) if impl == "tc" else (a.nchunks, k.ne[2] * s, z)
    if merged_in_cluster(node, impl, backend):
        a.q8 = int(id(node) in backend.q8_handoffs)
        return [backend.launch_struct(node, kernel_name(node, impl, backend), grid, block, a)]
    if a.nchunks > 1:
        a.part = backend.temp_ptr(node)
        a.count = _counters(backend) if impl != "tc" and grid[1] * grid[2] <= COUNTERS else None
    out = [backend.launch_struct(node, kernel_name(node, impl, backend), grid, block, a)]
    if a.nchunks > 1 and not a.count:
        out.append(backend.launch_struct(node, f"fa_combine_d{v.ne[0]}", (n * h * s, 1, 1), (v.ne[0], 1, 1), a))
    return out

