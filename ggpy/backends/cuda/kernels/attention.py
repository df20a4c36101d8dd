"""Windowed and cross attention as one kernel: mul_mat(k, q) -> soft_max(scale, mask) -> mul_mat(v^T, p) ->
permute -> cont (MobileSAM's TinyViT blocks: 49 or 196 tokens per window, heads of 32; its mask decoder: 7 prompt
tokens against 4096 image tokens and back, heads of 16) runs as `win_attn`, writing the cont's memory, instead of
two batched GEMM loops over the heads, a softmax pass and a copy.

q: ne = (HD, N, heads, nW), k: ne = (HD, Nk, heads_k, nW_k) with HD contiguous; v^T: ne = (Nk, HD, heads_k, nW_k)
(v's rows HD-contiguous); k and v broadcast over q's heads and windows as mul_mat's (heads_k | heads, nW_k | nW;
q itself may be a view of window stride 0); q, k and v of one type T (F32, F16 or BF16); the mask (optional,
F32/F16) ne = (Nk, >= N, mh, mw) broadcast over heads and windows as soft_max's; the result (HD, heads, N, nW) in
the contiguous memory of the pattern's last node (a cont, F32, or a cast to T). One block of 128 threads takes
32 queries of one (window, head); each query is split over 4 adjacent lanes (split_of: 1 lane for a few keys, 16
for a few queries over many keys) that take every 4th key of 64-key chunks staged in shared memory: up to
8 of a lane's scores at a time, one rescale by their max, then their P.V (an online softmax: running max, sum
and accumulator in registers); the lanes combine by shuffles.
Math in F32 (TF32, F16-weight and half-activation plans too). F16 / BF16 q, k, v run on tensor cores instead
(win_attn_tc_k: mma.sync with F32 accumulation, one warp per 16 queries, P rounded to the inputs' type for
P.V). The kernel of the fusion pass's attention pattern (ggpy/graph/fusion.py), not of an op: mul_mat's entry
(matmul.py) runs it as its Fused "attention" (`accepts`, `run`). The entry of the op flash_attn_ext is at the end
(its kernels are attention_flash.py's).
"""
from __future__ import annotations

import ctypes

from ....types import BF16, F16, F32
from . import attention_flash as flash
from ..registry import register
from .common import FLOATS, SUFFIX, apart, extent, tensor_ptr

HEAD_DIMS = (16, 32, 64)
THREADS = 128           # per block of win_attn_k: 128 / split queries
SPLITS = (1, 4, 16)     # lanes per query of win_attn_k (split): 1 for a few keys, 16 for a few queries over many
FEW = 8                 # "a few" keys, 2 FEW queries (image-to-prompt and prompt-to-image attention in SAM's decoder)
MIN_BLOCKS = 64         # blocks that keep the GPU busy: fewer, for a few queries over many keys, are refused
TENSOR_CORE_TYPES = (F16, BF16)     # q, k, v types of the tensor-core kernel (win_attn_tc_k)
TC_WARPS = 4            # warps per block of win_attn_tc_k, 16 queries each (the C macro of the same name)


_FIELDS = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("mask", ctypes.c_void_p),
           ("dst", ctypes.c_void_p), ("qs", ctypes.c_int64 * 3), ("ks", ctypes.c_int64 * 3),
           ("vs", ctypes.c_int64 * 3), ("ms", ctypes.c_int64 * 3), ("ds", ctypes.c_int64 * 3),
           ("n", ctypes.c_int), ("nk", ctypes.c_int), ("mh", ctypes.c_int), ("mw", ctypes.c_int),
           ("hr", ctypes.c_int), ("wr", ctypes.c_int), ("scale", ctypes.c_float)]


class AttnArgs(ctypes.Structure):
    """The C `struct AttnArgs` above."""
    _fields_ = _FIELDS


def split_of(n: int, nk: int) -> int:
    """Lanes per query of win_attn_k for n queries over nk keys."""
    return SPLITS[0] if nk <= FEW else SPLITS[2] if n <= 2 * FEW and nk > 8 * FEW else SPLITS[1]


def kernel_name(hd: int, mask_type, qkv_type=F32, out_type=F32, split: int = SPLITS[1]) -> str:
    """win_attn_... (CUDA cores, F32 math; `split` lanes per query), or win_attn_tc_... (tensor cores) for F16 /
    BF16 q, k, v."""
    kind = "tc_" if qkv_type in TENSOR_CORE_TYPES else f"s{split}_"
    return f"win_attn_{kind}hd{hd}_{SUFFIX[mask_type or F32]}_{SUFFIX[qkv_type]}_{SUFFIX[out_type]}"


def _aligned(t, dims) -> bool:
    return all(t.nb[d] % 16 == 0 for d in dims)


def accepts(f) -> bool:
    """Whether win_attn takes an Attention pattern of the fusion pass: q, k, v of one float type T, P and O F32,
    the result F32 or T; HD in HEAD_DIMS contiguous with 16-byte strides, fewer than 2^15 queries and 65536 heads
    and windows, no ALiBi; the mask F32/F16 with contiguous rows; at least MIN_BLOCKS blocks for a few queries
    over many keys (a block walks all the keys: a generated token's attention over a long cache is the GEMMs'
    work)."""
    q, k, v, mask = f.q, f.k, f.v, f.mask
    hd, n, heads, nw = q.ne
    t = q.type
    if (hd not in HEAD_DIMS or t not in FLOATS or any(x.type != t or x.nb[0] != t.size for x in (k, q))
            or not all(_aligned(x, (1, 2, 3)) for x in (k, q)) or n >= 1 << 15 or heads > 65535 or nw > 65535):
        return False
    if any(x.type != F32 for x in (f.head, f.soft, f.out)) or f.cont.type not in (F32, t):
        return False
    if f.soft.op_params["max_bias"] != 0:
        return False
    if mask is not None and (mask.type not in (F32, F16) or mask.nb[0] != mask.type.size):
        return False
    if n <= 2 * FEW and k.ne[1] > 4 * FEW and _blocks(n, k.ne[1], t) * heads * nw < MIN_BLOCKS:
        return False        # too few blocks of a few queries over many keys (a generated token's): the GEMMs run
    return v.type == t and v.nb[1] == t.size and _aligned(v, (0, 2, 3))


def _blocks(n: int, nk: int, t) -> int:
    """Blocks per (head, window) of n queries over nk keys in q, k, v of type t (win_attn_tc_k's or win_attn_k's)."""
    per_block = 16 * TC_WARPS if t in TENSOR_CORE_TYPES else THREADS // split_of(n, nk)
    return -(-n // per_block)


def run(backend, f) -> list | None:
    """steps(f) where every operand is on this GPU, q, k, v and the result 16-byte aligned and the cont's memory
    clear of them all."""
    srcs = [t for t in (f.q, f.k, f.v, f.mask) if t is not None]
    if not backend.on_device(*srcs, f.cont) or any(tensor_ptr(t) % 16 for t in (f.q, f.k, f.v, f.cont)):
        return None
    return steps(backend, f) if apart(f.cont, [extent(t) for t in srcs]) else None


def steps(backend, f) -> list:
    """The win_attn launch of an accepted Attention pattern (the cont's memory clear of q, k, v and the mask: run
    checks). A query gets 4 lanes; 1 when there are a few keys (image tokens attending to prompt tokens),
    16 for a few queries over many keys (prompt tokens attending to an image)."""
    q, k, v, mask = f.q, f.k, f.v, f.mask
    hd, n, heads, nw = q.ne
    nk = k.ne[1]
    a = AttnArgs(q=tensor_ptr(q), k=tensor_ptr(k), v=tensor_ptr(v), dst=tensor_ptr(f.cont), n=n, nk=nk,
                 hr=heads // k.ne[2], wr=nw // k.ne[3], scale=f.soft.op_params["scale"])
    a.qs = (ctypes.c_int64 * 3)(*q.nb[1:])
    a.ks = (ctypes.c_int64 * 3)(*k.nb[1:])
    a.vs = (ctypes.c_int64 * 3)(v.nb[0], v.nb[2], v.nb[3])
    es = f.cont.type.size
    a.ds = (ctypes.c_int64 * 3)(heads * hd * es, hd * es, n * heads * hd * es)     # (HD, heads, N, nW) contiguous
    if mask is not None:
        a.mask = tensor_ptr(mask)
        a.ms = (ctypes.c_int64 * 3)(*mask.nb[1:])
        a.mh, a.mw = mask.ne[2], mask.ne[3]
    else:
        a.mh = a.mw = 1
    tc = q.type in TENSOR_CORE_TYPES
    name = kernel_name(hd, mask.type if mask is not None else None, q.type, f.cont.type, split_of(n, nk))
    grid = (_blocks(n, nk, q.type), heads, nw)
    return [backend.launch_struct(f.head, name, grid, (32 * TC_WARPS if tc else THREADS, 1, 1), a)]


def flash_attn_refusal(node) -> str | None:
    q, k, v = node.src[:3]
    mask = node.src[3] if len(node.src) > 3 else None
    d, dv = q.ne[0], v.ne[0]
    if d != dv or d not in flash.HEAD_DIMS:
        return f"flash_attn_ext on CUDA takes head dims {flash.HEAD_DIMS} with D == Dv, not D={d}, Dv={dv}"
    if k.type not in flash.KV_TYPES or v.type not in flash.KV_TYPES:
        return (f"flash_attn_ext on CUDA takes K and V of {[t.name for t in flash.KV_TYPES]}, not {k.type.name} and "
                f"{v.type.name}")
    if mask is not None and (mask.type not in (F32, F16) or mask.nb[0] != mask.type.size):
        return f"flash_attn_ext on CUDA takes an F32 or F16 mask with contiguous rows, not {mask.type.name} nb={mask.nb}"
    if any(s % flash.ALIGN[t.type] for t in (k, v) for s in t.nb[1:]) or any(s % 4 for s in q.nb[1:]):
        return (f"flash_attn_ext on CUDA reads K's and V's rows aligned to {flash.ALIGN[k.type]} and "
                f"{flash.ALIGN[v.type]} bytes: k nb={k.nb}, v nb={v.nb}, q nb={q.nb}")
    pair_blocks = -(-q.ne[2] // k.ne[2] * q.ne[1] // flash.rows(d)[-1])
    if k.ne[1] == 0 or k.ne[1] >= 1 << 31 or k.ne[2] * q.ne[3] > 65535 or q.ne[2] > 65535 or pair_blocks > 65535:
        return f"flash_attn_ext on CUDA: q ne={q.ne}, k ne={k.ne} exceed its grid"
    return None


register(ops=("flash_attn_ext",), refusal=flash_attn_refusal, impls=("vec", "tc", "dec"), choose=flash.choose,
         accepts=flash.accepts, temp_size=flash.temp_size, name=flash.kernel_name, steps=flash.steps)
