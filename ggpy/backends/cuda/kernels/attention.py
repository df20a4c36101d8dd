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
P.V). The kernel of the fusion pass's attention pattern (ggpy/graph/fusion.py), not of an op: the backend
accepts a pattern (`accepts`) and calls `steps`. The op flash_attn_ext has no CUDA kernel yet (it runs on the CPU).
"""
from __future__ import annotations

import ctypes

from ....types import BF16, F16, F32
from ..registry import register
from .common import C_TYPES, FLOATS, SUFFIX, tensor_ptr

HEAD_DIMS = (16, 32, 64)
THREADS = 128           # per block of win_attn_k: 128 / split queries
SPLITS = (1, 4, 16)     # lanes per query of win_attn_k (split): 1 for a few keys, 16 for a few queries over many
FEW = 8                 # "a few" keys, 2 FEW queries (image-to-prompt and prompt-to-image attention in SAM's decoder)
MIN_BLOCKS = 64         # blocks that keep the GPU busy: fewer, for a few queries over many keys, are refused
TENSOR_CORE_TYPES = (F16, BF16)     # q, k, v types of the tensor-core kernel (win_attn_tc_k)
TC_WARPS = 4            # warps per block of win_attn_tc_k, 16 queries each (the C macro of the same name)

SOURCE = r"""
struct AttnArgs {
    const char* q; const char* k; const char* v; const char* mask; char* dst;
    i64 qs[3]; i64 ks[3]; i64 vs[3];              // bytes between tokens, heads, windows
    i64 ms[3];                                     // mask: bytes between query rows, heads, windows
    i64 ds[3];                                     // dst: bytes between tokens, heads, windows
    int n, nk, mh, mw;                             // queries and keys per window; the mask's heads and windows
    int hr, wr;                                    // query heads and windows per head and window of k and v
    float scale;
};

template <int HD, int SPLIT, typename M, typename T, typename D> __device__ void win_attn_k(const AttnArgs& a) {
    constexpr int KC = 64, PAD = 4;
    __shared__ __align__(16) float Ks[KC][HD + PAD];
    __shared__ __align__(16) float Vs[KC][HD + PAD];
    const float NEG = __int_as_float(0xff800000);
    const int part = threadIdx.x & (SPLIT - 1), n = blockIdx.x * (blockDim.x / SPLIT) + threadIdx.x / SPLIT;
    const int h = blockIdx.y, w = blockIdx.z, N = a.n, NK = a.nk;
    const bool active = n < N;
    const char* kb = a.k + (h / a.hr) * a.ks[1] + (w / a.wr) * a.ks[2];
    const char* vb = a.v + (h / a.hr) * a.vs[1] + (w / a.wr) * a.vs[2];
    float q[HD], acc[HD];
    #pragma unroll
    for (int d = 0; d < HD; d += 4) {
        float4 v4 = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active) v4 = load4<T>(a.q + n * a.qs[0] + h * a.qs[1] + w * a.qs[2] + d * sizeof(T));
        q[d] = v4.x; q[d + 1] = v4.y; q[d + 2] = v4.z; q[d + 3] = v4.w;
        acc[d] = acc[d + 1] = acc[d + 2] = acc[d + 3] = 0.f;
    }
    const char* mrow = a.mask && active ? a.mask + n * a.ms[0] + (h % a.mh) * a.ms[1] + (w % a.mw) * a.ms[2] : 0;
    float m = NEG, l = 0.f;
    for (int j0 = 0; j0 < NK; j0 += KC) {
        const int kc = min(KC, NK - j0);
        __syncthreads();                           // the previous chunk is read by everyone
        for (int t = threadIdx.x; t < kc * (HD / 4); t += blockDim.x) {
            const int j = t / (HD / 4), d = (t % (HD / 4)) * 4;
            *(float4*)&Ks[j][d] = load4<T>(kb + (i64)(j0 + j) * a.ks[0] + d * sizeof(T));
            *(float4*)&Vs[j][d] = load4<T>(vb + (i64)(j0 + j) * a.vs[0] + d * sizeof(T));
        }
        __syncthreads();
        if (active) {
            // this lane's keys of the chunk (every SPLIT-th): all scores first (independent dot products),
            // one rescale per chunk by the chunk's max, then the weighted sum of V
            constexpr int G = KC / SPLIT < 8 ? KC / SPLIT : 8;   // keys of a lane per rescale (registers vs. rescales)
            #pragma unroll
            for (int g = 0; g < KC / SPLIT; g += G) {
                if (part + g * SPLIT >= kc) break;
                float sc[G];
                float cmax = NEG;
                #pragma unroll
                for (int t = 0; t < G; ++t) {
                    const int j = part + (g + t) * SPLIT;
                    float s = NEG;
                    if (j < kc) {
                        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
                        #pragma unroll
                        for (int d = 0; d < HD; d += 4) {
                            const float4 k4 = *(const float4*)&Ks[j][d];
                            s0 += q[d] * k4.x; s1 += q[d + 1] * k4.y; s2 += q[d + 2] * k4.z; s3 += q[d + 3] * k4.w;
                        }
                        s = ((s0 + s1) + (s2 + s3)) * a.scale;
                        if (mrow) s += to_f(*(const M*)(mrow + (i64)(j0 + j) * sizeof(M)));
                    }
                    sc[t] = s;
                    cmax = fmaxf(cmax, s);
                }
                if (cmax > m) {                         // a new running max: rescale what was summed so far
                    const float c = m == NEG ? 0.f : expf(m - cmax);
                    l *= c;
                    #pragma unroll
                    for (int d = 0; d < HD; ++d) acc[d] *= c;
                    m = cmax;
                }
                #pragma unroll
                for (int t = 0; t < G; ++t) {
                    const int j = part + (g + t) * SPLIT;
                    if (j < kc) {
                        const float p = sc[t] == NEG ? 0.f : expf(sc[t] - m);
                        l += p;
                        #pragma unroll
                        for (int d = 0; d < HD; d += 4) {
                            const float4 v4 = *(const float4*)&Vs[j][d];
                            acc[d] += p * v4.x; acc[d + 1] += p * v4.y; acc[d + 2] += p * v4.z; acc[d + 3] += p * v4.w;
                        }
                    }
                }
            }
        }
    }
    // combine the SPLIT lanes of each query (every lane ends with the whole result)
    #pragma unroll
    for (int o = 1; o < SPLIT; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        const float mn = fmaxf(m, m2);
        const float c1 = m == NEG ? 0.f : expf(m - mn), c2 = m2 == NEG ? 0.f : expf(m2 - mn);
        l = l * c1 + l2 * c2;
        #pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] = acc[d] * c1 + __shfl_xor_sync(0xffffffffu, acc[d], o) * c2;
        m = mn;
    }
    if (!active) return;
    const float inv = 1.f / l;
    char* out = a.dst + n * a.ds[0] + h * a.ds[1] + w * a.ds[2];
    #pragma unroll
    for (int d = 0; d < HD; d += 4)
        if ((d / 4) % SPLIT == part)
            store4<D>(out + d * sizeof(D), make_float4(acc[d] * inv, acc[d + 1] * inv, acc[d + 2] * inv, acc[d + 3] * inv));
}
// Tensor-core window attention for F16 / BF16 q, k, v (mma.sync m16n8k16, F32 accumulation). One warp per 16
// queries of one (window, head), TC_WARPS warps per block; keys in chunks of 64 staged in shared memory (K as
// rows, V transposed); scores and the online softmax stay in registers, where the accumulators of two 8-key
// blocks are the A operand of P.V (FlashAttention-2's layout); P is rounded to T for that product.
__device__ __forceinline__ unsigned short bits(half_t h) { return h; }
__device__ __forceinline__ unsigned short bits(bf16_t b) { return b.x; }
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return (unsigned)bits(from_f<T>(lo)) | ((unsigned)bits(from_f<T>(hi)) << 16);
}
template <typename T> __device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b);
template <> __device__ __forceinline__ void mma16816<half_t>(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma16816<bf16_t>(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#define TC_WARPS 4
template <int HD, typename M, typename T, typename D> __device__ void win_attn_tc_k(const AttnArgs& a) {
    constexpr int KC = 64, KP = HD + 8, VP = KC + 8;         // row paddings (halves) against bank conflicts
    __shared__ __align__(16) unsigned short Ks[KC][KP];
    __shared__ __align__(16) unsigned short Vt[HD][VP];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y, w = blockIdx.z, N = a.n, NK = a.nk;
    const int q0 = (blockIdx.x * TC_WARPS + warp) * 16;
    const char* qb = a.q + h * a.qs[1] + w * a.qs[2];
    const char* kb = a.k + (h / a.hr) * a.ks[1] + (w / a.wr) * a.ks[2];
    const char* vb = a.v + (h / a.hr) * a.vs[1] + (w / a.wr) * a.vs[2];
    unsigned qa[HD / 16][4];                                  // A fragments of Q (16 x HD, row-major)
    #pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = q0 + g + (r & 1) * 8, col = ks * 16 + t4 * 2 + (r >> 1) * 8;
            qa[ks][r] = row < N ? *(const unsigned*)(qb + row * a.qs[0] + col * 2) : 0u;
        }
    const char* mrow[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = q0 + g + i * 8;
        mrow[i] = a.mask && row < N ? a.mask + row * a.ms[0] + (h % a.mh) * a.ms[1] + (w % a.mw) * a.ms[2] : 0;
    }
    float o[HD / 8][4], m[2] = {NEG, NEG}, l[2] = {0.f, 0.f};
    #pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    for (int j0 = 0; j0 < NK; j0 += KC) {
        const int kc = min(KC, NK - j0);
        __syncthreads();                                      // the previous chunk is read by everyone
        for (int i = threadIdx.x; i < KC * HD / 2; i += blockDim.x) {
            const int j = i / (HD / 2), d = (i % (HD / 2)) * 2;
            unsigned kv = 0u, vv = 0u;
            if (j < kc) {
                kv = *(const unsigned*)(kb + (i64)(j0 + j) * a.ks[0] + d * 2);
                vv = *(const unsigned*)(vb + (i64)(j0 + j) * a.vs[0] + d * 2);
            }
            *(unsigned*)&Ks[j][d] = kv;
            Vt[d][j] = (unsigned short)(vv & 0xffffu);
            Vt[d + 1][j] = (unsigned short)(vv >> 16);
        }
        __syncthreads();
        if (q0 >= N) continue;                                // no query of this warp (barriers still met)
        float s[KC / 8][4];
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
            #pragma unroll
            for (int ks = 0; ks < HD / 16; ++ks) {
                const unsigned b[2] = {*(const unsigned*)&Ks[nb * 8 + g][ks * 16 + t4 * 2],
                                       *(const unsigned*)&Ks[nb * 8 + g][ks * 16 + t4 * 2 + 8]};
                mma16816<T>(s[nb], qa[ks], b);
            }
        }
        float cmax[2] = {NEG, NEG};
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int j = j0 + nb * 8 + t4 * 2 + (r & 1), i = r >> 1;
                float v = NEG;
                if (j < NK) {
                    v = s[nb][r] * a.scale;
                    if (mrow[i]) v += to_f(*(const M*)(mrow[i] + (i64)j * sizeof(M)));
                }
                s[nb][r] = v;
                cmax[i] = fmaxf(cmax[i], v);
            }
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 1));
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 2));
            if (cmax[i] > m[i]) {                             // a new running max: rescale what was summed so far
                const float c = m[i] == NEG ? 0.f : expf(m[i] - cmax[i]);
                l[i] *= c;
                #pragma unroll
                for (int nd = 0; nd < HD / 8; ++nd) { o[nd][2 * i] *= c; o[nd][2 * i + 1] *= c; }
                m[i] = cmax[i];
            }
        }
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = r >> 1;
                const float p = s[nb][r] == NEG ? 0.f : expf(s[nb][r] - m[i]);
                l[i] += p;
                s[nb][r] = p;
            }
        #pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk) {
            const unsigned pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int nd = 0; nd < HD / 8; ++nd) {
                const unsigned b[2] = {*(const unsigned*)&Vt[nd * 8 + g][kk * 16 + t4 * 2],
                                       *(const unsigned*)&Vt[nd * 8 + g][kk * 16 + t4 * 2 + 8]};
                mma16816<T>(o[nd], pa, b);
            }
        }
    }
    if (q0 >= N) return;
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    #pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int i = r >> 1, row = q0 + g + i * 8;
            if (row < N)
                *(D*)(a.dst + row * a.ds[0] + h * a.ds[1] + w * a.ds[2] + (nd * 8 + t4 * 2 + (r & 1)) * sizeof(D)) =
                    from_f<D>(o[nd][r] / l[i]);
        }
}
"""

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


def source() -> str:
    parts = [SOURCE]
    for hd in HEAD_DIMS:
        for m in (F32, F16):
            for t in FLOATS:
                for d in dict.fromkeys((F32, t)):          # F32 (a cont), or a cast back to the inputs' type
                    types = f"{C_TYPES[m]}, {C_TYPES[t]}, {C_TYPES[d]}"
                    if t in TENSOR_CORE_TYPES:
                        parts.append(f'extern "C" __global__ void {kernel_name(hd, m, t, d)}(const AttnArgs a) '
                                     f'{{ win_attn_tc_k<{hd}, {types}>(a); }}\n')
                        continue
                    for split in SPLITS:
                        parts.append(f'extern "C" __global__ void {kernel_name(hd, m, t, d, split)}(const AttnArgs a)'
                                     f' {{ win_attn_k<{hd}, {split}, {types}>(a); }}\n')
    return "".join(parts)


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


def steps(backend, f) -> list:
    """The win_attn launch of an accepted Attention pattern (the cont's memory clear of q, k, v and the mask: the
    backend checks). A query gets 4 lanes; 1 when there are a few keys (image tokens attending to prompt tokens),
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


def flash_attn_refusal(node) -> str:
    return "flash_attn_ext has no CUDA kernel yet (a scheduler runs it on the CPU)"


register(ops=("flash_attn_ext",), source=lambda: "", refusal=flash_attn_refusal, kernel_name=lambda node: "")
