// flash_attn_ext (kernels/attention_flash.py): FaArgs (twin of the ctypes struct) and the kernels of few query rows
// (prompt chunks: attention_fa_mma.cuh).
// fa_vec_k: few query rows (a generated token), the keys split in chunks over blockIdx.x; a block takes one chunk of
//   one KV head for RB (query head, row) pairs of its group (blockIdx.z the pairs, blockIdx.y KV head and sequence);
//   a group of D / 8 lanes takes a key, each lane the same 8 elements of q (registers), K and V, so a lane group
//   keeps its own online softmax and accumulator with no exchange but the score's sum; a pass takes FA_NB
//   keys a lane group in little code (passes of 8 keys fully unrolled, ~100 KB of SASS, took ~5 us each
//   on an H200 whatever their keys), its loads issued a pass ahead; the lane groups, then the warps merged at the
//   end. The chunks of a (blockIdx.y, z) merge
//   either as one cluster of FA_CL blocks through their shared memory (sm_90 on, the _cl kernels), or, one chunk
//   writing dst, several (at most FA_MAXC) write their partial (max, sum, accumulator) in the temp block, merged by
//   the last block of the pairs to arrive (a.count) or else by fa_combine_k. F32 math on F32, F16 or Q8_0 K and V.
// Heads of 256 (Gemma-2/3, whose sliding blocks read the whole cache under a window mask): a block first finds the
// keys its rows' mask leaves finite (fa_live) and splits those among the chunks, so the hidden keys are never read.
// A row whose scores are all -inf gives zeros (as the CPU kernel).
#pragma once
#include "attention.cuh"

struct FaArgs {
    const char* q; const char* k; const char* v; const char* mask; char* dst; float* part;
    i64 qs[3];                  // q: bytes between query rows, heads, sequences
    i64 ks[3]; i64 vs[3];       // k, v: bytes between keys, KV heads, sequences
    i64 ms[3];                  // mask: bytes between query rows, dims 2, 3
    i64 ds[3];                  // dst: bytes between heads, query rows, sequences
    int n, nkv, h, hk, sr;      // query rows, keys, query heads, KV heads, q's sequences per K/V sequence
    int mh, mw, mask_f16;       // the mask's dims 2, 3 and type (0: F32, 1: F16)
    int chunk, nchunks;         // fa_vec_k: keys per block, blocks along the keys
    float scale, softcap, m0, m1;
    int nlog2;                  // ALiBi: slope m0^(h+1) for h < nlog2, else m1^(2(h-nlog2)+1) (m0 = m1 = 1: none)
    int* count;                 // fa_vec_k: chunks arrived per (blockIdx.y, blockIdx.z), zero between kernels (or null)
    int q8;                     // a cluster's output as q8_1 blocks for the mat-vec that reads it (one query row, one
};                              // sequence; kernels/handoff.py): quants at dst + hq Dv + d, (d, d sum q) pairs after h Dv

#define FA_WARPS 8              // fa_vec_k's warps (attention_flash.py VEC_WARPS)
#define FA_NB 2                 // fa_vec_k: keys a lane group takes a pass (4 in a cluster: slower on an H200)
#define FA_MAXC 32              // fa_vec_k: chunks its last block merges at most (attention_flash.py MAX_CHUNKS)
#define FA_CL 8                 // fa_vec_k: blocks of a cluster (attention_flash.py CLUSTER)

struct q8_0_t {};               // K / V rows of Q8_0 blocks: f16 d, 32 int8 (34 bytes)
template <typename T> struct FaRow { static constexpr __device__ int bytes(int d) { return d * (int)sizeof(T); } };    // K / V row
template <> struct FaRow<q8_0_t> { static constexpr __device__ int bytes(int d) { return d / 32 * 34; } };             // bytes
// a lane's 8 consecutive elements 8 sub .. 8 sub + 7 of a K / V row: `load` issues the loads, `get` converts
template <typename T> struct FaLd {                 // F16 (rows aligned to 8 bytes)
    uint2 u[2];
    __device__ __forceinline__ void load(const char* r, int sub) {
        u[0] = *(const uint2*)(r + sub * 16); u[1] = *(const uint2*)(r + sub * 16 + 8);
    }
    __device__ __forceinline__ void get(float* x) const {
        const half_t* h = (const half_t*)u;
        #pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = to_f(h[i]);
    }
};
template <> struct FaLd<float> {
    float4 u[2];
    __device__ __forceinline__ void load(const char* r, int sub) {
        u[0] = *(const float4*)(r + sub * 32); u[1] = *(const float4*)(r + sub * 32 + 16);
    }
    __device__ __forceinline__ void get(float* x) const {
        x[0] = u[0].x; x[1] = u[0].y; x[2] = u[0].z; x[3] = u[0].w; x[4] = u[1].x; x[5] = u[1].y; x[6] = u[1].z;
        x[7] = u[1].w;
    }
};
template <> struct FaLd<q8_0_t> {                   // rows aligned to 2 bytes: 16-bit loads
    unsigned short s, w[4];
    __device__ __forceinline__ void load(const char* r, int sub) {
        const unsigned short* b = (const unsigned short*)(r + (sub >> 2) * 34);
        s = b[0];
        #pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = b[1 + (sub & 3) * 4 + i];
    }
    __device__ __forceinline__ void get(float* x) const {
        const float d = to_f((half_t)s);
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            x[2 * i] = d * (float)(signed char)(w[i] & 0xff);
            x[2 * i + 1] = d * (float)(signed char)(w[i] >> 8);
        }
    }
};

__device__ __noinline__ float fa_slope_of(float m0, float m1, int nlog2, int h) {     // one copy: powf is long code
    return h < nlog2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - nlog2) + 1));
}
__device__ __forceinline__ float fa_slope(const FaArgs& a, int h) { return fa_slope_of(a.m0, a.m1, a.nlog2, h); }
__device__ __noinline__ float fa_softcap(float cap, float x) { return cap * tanhf(x); }   // one copy
__device__ __forceinline__ float fa_mask(const FaArgs& a, const char* row, int j) {
    return a.mask_f16 ? to_f(((const half_t*)row)[j]) : ((const float*)row)[j];
}
__device__ __forceinline__ float fa_warp_max(float x) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float fa_warp_sum(float x) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// element d of output row `row` ((i3 n + i1) h + hq) from the chunks' partials: sum_c acc_c e^(m_c - M) over
// sum_c l_c e^(m_c - M) (read past L1: other blocks wrote them)
template <int DV> __device__ void fa_combine_row(const FaArgs& a, i64 row, int d) {
    const float NEG = __int_as_float(0xff800000);
    const int hq = (int)(row % a.h), i1 = (int)(row / a.h % a.n), i3 = (int)(row / a.h / a.n);
    const float* pr = a.part + row * a.nchunks * (DV + 2);
    float M = NEG, L = 0.f, A = 0.f;
    for (int c = 0; c < a.nchunks; ++c) M = fmaxf(M, __ldcg(pr + c * (DV + 2)));
    for (int c = 0; c < a.nchunks; ++c) {
        const float mc = __ldcg(pr + c * (DV + 2));
        if (mc == NEG) continue;
        const float e = expf(mc - M);
        L += __ldcg(pr + c * (DV + 2) + 1) * e;
        A += __ldcg(pr + c * (DV + 2) + 2 + d) * e;
    }
    *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = L > 0.f ? A / L : 0.f;
}

// fa_vec_k's entries: two blocks an SM (at most 128 registers a thread) for up to 4 pairs, else one; _CL: a cluster
// of FA_CL blocks on sm_90, one block an SM
#define FA_VEC2 __launch_bounds__(FA_WARPS * 32, 2)
#define FA_VEC1 __launch_bounds__(FA_WARPS * 32, 1)
#if __CUDA_ARCH__ >= 900
#define FA_VEC_CL __cluster_dims__(FA_CL, 1, 1) __launch_bounds__(FA_WARPS * 32, 1)
#else
#define FA_VEC_CL FA_VEC1
#endif
__device__ __forceinline__ void fa_cluster_sync() {         // every block of the cluster here, its writes visible
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void fa_cluster_arrive(bool release) {   // the block's arrival, its writes visible (release)
#if __CUDA_ARCH__ >= 900
    if (release) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    else asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void fa_cluster_wait() {         // every block of the cluster arrived, their writes visible
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// whether fa_finish's blocks push their (max, sum, accumulator) into rank 0's shared memory (one barrier, the others
// leave at once), where they fit beside the warps' (W warps, RB pairs, DV; static shared 48 KB at most), else each
// block reads the others' (two barriers)
template <int W, int RB, int DV, int CL> __host__ __device__ constexpr bool fa_push() {
    return CL > 1 && 4 * RB * ((CL - 1 + W) * (DV + 2) + 2) <= 48 * 1024 - 512;
}
// a kernel's start: with fa_push, its arrival at the first cluster barrier (no block writes into rank 0's memory
// before every block has started; by fa_finish the others have long arrived)
template <int W, int RB, int DV, int CL> __device__ __forceinline__ void fa_cluster_start() {
    if constexpr (fa_push<W, RB, DV, CL>()) fa_cluster_arrive(false);
}
template <typename T> __device__ __forceinline__ T* fa_cluster_map(T* p, int rank) {
#if __CUDA_ARCH__ >= 900
    T* q;
    asm("mapa.u64 %0, %1, %2;" : "=l"(q) : "l"(p), "r"(rank));     // the same shared variable of block `rank`
    return q;
#else
    return p;
#endif
}
__device__ __forceinline__ int fa_cluster_rank() {
    int r = 0;
#if __CUDA_ARCH__ >= 900
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
    return r;
}

// a pass's loads of a lane group: its NB keys j0 + t G (below c1) of K and V, and the mask's bits of them for each row
template <int RB, int NB, int G, typename TK, typename TV>
__device__ __forceinline__ void fa_issue(const FaArgs& a, const char* kb, const char* vb, const char* const* mrow,
                                         int j0, int c1, int sub, FaLd<TK>* kr, FaLd<TV>* vr, unsigned (*mb)[NB]) {
    #pragma unroll
    for (int t = 0; t < NB; ++t) {
        const int j = j0 + t * G;
        kr[t] = FaLd<TK>{}; vr[t] = FaLd<TV>{};
        if (j < c1) {
            kr[t].load(kb + (i64)j * a.ks[0], sub);
            vr[t].load(vb + (i64)j * a.vs[0], sub);
        }
        #pragma unroll
        for (int r = 0; r < RB; ++r)
            mb[r][t] = j < c1 && mrow[r] ? (a.mask_f16 ? *(const unsigned short*)(mrow[r] + 2 * j)
                                                        : *(const unsigned*)(mrow[r] + 4 * j)) : 0u;
    }
}

// the keys [lo, hi) from the first to the last that the mask rows mrow[0 .. RB) (null: none) leave finite, over the
// block (16-byte loads of an F16 mask whose rows are so aligned); lo == hi where none is
template <int RB> __device__ void fa_live(const FaArgs& a, const char* const* mrow, int& lo, int& hi) {
    __shared__ int slo, shi;
    if (threadIdx.x == 0) { slo = a.nkv; shi = 0; }
    __syncthreads();
    int tlo = a.nkv, thi = 0;
    #pragma unroll
    for (int r = 0; r < RB; ++r) {
        if (!mrow[r] || (r > 0 && mrow[r] == mrow[r - 1])) continue;        // the heads of a row: one mask row
        int j0 = 0;                                         // keys from j0 on one a thread
        if (a.mask_f16 && ((unsigned long long)mrow[r] & 15) == 0) {
            j0 = a.nkv / 8 * 8;
            for (int j = threadIdx.x * 8; j < j0; j += blockDim.x * 8) {
                const uint4 u = *(const uint4*)(mrow[r] + 2 * j);
                const unsigned w[4] = {u.x, u.y, u.z, u.w};
                #pragma unroll
                for (int e = 0; e < 8; ++e)
                    if ((w[e >> 1] >> (16 * (e & 1)) & 0xffffu) != 0xfc00u) { tlo = min(tlo, j + e); thi = max(thi, j + e + 1); }
            }
        }
        for (int j = j0 + threadIdx.x; j < a.nkv; j += blockDim.x)
            if (fa_mask(a, mrow[r], j) != __int_as_float(0xff800000)) { tlo = min(tlo, j); thi = max(thi, j + 1); }
    }
    tlo = __reduce_min_sync(0xffffffffu, tlo); thi = __reduce_max_sync(0xffffffffu, thi);
    if ((threadIdx.x & 31) == 0) { atomicMin(&slo, tlo); atomicMax(&shi, thi); }
    __syncthreads();
    lo = slo; hi = max(slo, shi);
}

// the K and V rows [j0, j1) (row bytes kr, vr) asked into L2 by the block's threads, then the grid wait (PDL): their
// loads after it find them there (L2 is coherent: the new token's rows, which the kernel before may still be
// writing, are read as written)
__device__ __forceinline__ void fa_prefetch_wait(const char* kb, i64 ks, int kr, const char* vb, i64 vs, int vr, int j0,
                                                 int j1) {
    const int kl = (kr + 127) >> 7, lines = kl + ((vr + 127) >> 7);
    for (int t = threadIdx.x; t < (j1 - j0) * lines; t += blockDim.x) {
        const int j = j0 + t / lines, l = t % lines;
        const char* p = l < kl ? kb + (i64)j * ks + 128 * l : vb + (i64)j * vs + 128 * (l - kl);
        asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
    }
    grid_dependency();
}

// a block's end: its W warps' (max in natural-log units, sum, accumulator) of the pairs r < np in wm, wl, wacc merged,
// then written to dst (one chunk), merged across the cluster (CL > 1: fa_push's way, else every block a part through
// the others' memory), or written as the chunk's partial and merged by the chunks' last block to arrive (a.count).
// g: the KV head. The cluster's merge takes the chunks in rank order either way (the same bits).
template <int W, int RB, int DV, int CL>
__device__ void fa_finish(const FaArgs& a, const float (*wm)[RB], const float (*wl)[RB], float (*wacc)[RB][DV], int np,
                          int p0, int g, int i3) {
    const float NEG = __int_as_float(0xff800000);
    constexpr bool PUSH = fa_push<W, RB, DV, CL>();
    constexpr int IN = PUSH ? CL - 1 : 1;
    const int group = a.h / a.hk, rank = CL > 1 ? fa_cluster_rank() : 0;
    __syncthreads();
    __shared__ float bm[RB], bl[RB];                            // CL > 1: the block's max and sum (wacc[0]: its acc)
    __shared__ float im[IN][RB], il[IN][RB];                    // PUSH, rank 0: those of ranks 1.. (ia: their acc)
    __shared__ __align__(16) float ia[IN][RB][PUSH ? DV : 1];
    if (PUSH) fa_cluster_wait();                                // every block started: rank 0's memory is there
    for (int t = threadIdx.x; t < np * DV; t += blockDim.x) {       // the warps merged
        const int r = t / DV, d = t % DV, p = p0 + r, hq = g * group + p % group, i1 = p / group;
        float M = NEG, S = 0.f, A = 0.f;
        #pragma unroll
        for (int w = 0; w < W; ++w) M = fmaxf(M, wm[w][r]);
        #pragma unroll
        for (int w = 0; w < W; ++w) {
            const float c = wm[w][r] == NEG ? 0.f : __expf(wm[w][r] - M);
            S += wl[w][r] * c;
            A += wacc[w][r][d] * c;
        }
        if (PUSH && rank > 0) {                                 // into rank 0's inbox
            if (d == 0) { *fa_cluster_map(&im[rank - 1][r], 0) = M; *fa_cluster_map(&il[rank - 1][r], 0) = S; }
            *fa_cluster_map(&ia[rank - 1][r][PUSH ? d : 0], 0) = A;
        } else if (CL > 1) {                                    // a thread reads and writes its own (r, d) only
            if (d == 0) { bm[r] = M; bl[r] = S; }
            wacc[0][r][d] = A;
        } else if (a.nchunks == 1) {
            *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = S > 0.f ? A / S : 0.f;
        } else {
            float* pr = a.part + (((i64)(i3 * a.n + i1) * a.h + hq) * a.nchunks + blockIdx.x) * (DV + 2);
            if (d == 0) { pr[0] = M; pr[1] = S; }
            pr[2 + d] = A;
        }
    }
    if constexpr (CL > 1) {
        // chunk c's max, sum and acc element (r, d): rank 0's inbox, or block c's own memory
        auto m_of = [&](int c, int r) { return PUSH ? (c ? im[c - 1][r] : bm[r]) : *fa_cluster_map(&bm[r], c); };
        auto l_of = [&](int c, int r) { return PUSH ? (c ? il[c - 1][r] : bl[r]) : *fa_cluster_map(&bl[r], c); };
        auto a_of = [&](int c, int r, int d) {
            return PUSH ? (c ? ia[c - 1][r][PUSH ? d : 0] : wacc[0][r][d]) : *fa_cluster_map(&wacc[0][r][d], c);
        };
        if (PUSH) {
            fa_cluster_arrive(true);                            // this block's part in rank 0's memory (or its own)
            if (rank > 0) return;
            fa_cluster_wait();
        } else {
            fa_cluster_sync();                                  // every block's (max, sum, acc) in its shared memory
        }
        for (int t = (PUSH ? 0 : rank) * blockDim.x + threadIdx.x; t < np * DV; t += (PUSH ? 1 : CL) * blockDim.x) {
            const int r = t / DV, d = t % DV, p = p0 + r, hq = g * group + p % group, i1 = p / group;
            float mc[CL], M = NEG, S = 0.f, A = 0.f;
            #pragma unroll
            for (int c = 0; c < CL; ++c) M = fmaxf(M, mc[c] = m_of(c, r));
            #pragma unroll
            for (int c = 0; c < CL; ++c) {
                const float e = mc[c] == NEG ? 0.f : __expf(mc[c] - M);
                S += l_of(c, r) * e;
                A += a_of(c, r, d) * e;
            }
            const float out = S > 0.f ? A / S : 0.f;
            if (a.q8) {         // a warp's lanes hold 32 consecutive d of one pair (np Dv is a multiple of 32)
                const int e = hq * DV + d, lane = threadIdx.x & 31;
                quantize_32(out, lane, (signed char*)a.dst + e - lane, (float2*)(a.dst + a.h * DV) + e / 32);
            } else {
                *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = out;
            }
        }
        if (!PUSH) fa_cluster_sync();                           // no block leaves while another reads its memory
        return;
    }
    if (a.nchunks == 1 || !a.count) return;
    __shared__ bool last;                                       // the chunks' last block merges their partials
    __syncthreads();                                            // the block's partials written
    if (threadIdx.x == 0) {             // one acq_rel add: releases them, acquires the other blocks' (no SC fence)
        int* c = a.count + blockIdx.y * gridDim.z + blockIdx.z;
        int old;
        asm volatile("atom.acq_rel.gpu.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
        last = old == a.nchunks - 1;
        if (last) *c = 0;                                       // every block of these pairs has counted
    }
    __syncthreads();
    if (!last) return;
    // the partials of the pairs r < np: a thread's element (r, d) of every chunk loaded at once (the first element
    // before the rest), the chunks' (max, sum) in shared memory, their weights e^(m_c - M) once per (pair, chunk); then
    // A / S as fa_combine_row, to the bit
    __shared__ float pm[RB][FA_MAXC], pl[RB][FA_MAXC], pe[RB][FA_MAXC];
    const float* part = a.part + (i64)i3 * a.n * a.h * a.nchunks * (DV + 2);
    auto row_of = [&](int r) {                                  // the partials of pair r
        const int p = p0 + r;
        return part + ((i64)(p / group) * a.h + g * group + p % group) * a.nchunks * (DV + 2);
    };
    float ac[FA_MAXC];
    auto load = [&](int t) {
        const float* pr = row_of(t / DV) + 2 + t % DV;
        #pragma unroll
        for (int c = 0; c < FA_MAXC; ++c) ac[c] = c < a.nchunks && t < np * DV ? __ldcg(pr + c * (DV + 2)) : 0.f;
    };
    load(threadIdx.x);
    for (int t = threadIdx.x; t < np * a.nchunks; t += blockDim.x) {
        const float* pr = row_of(t / a.nchunks) + t % a.nchunks * (DV + 2);
        pm[t / a.nchunks][t % a.nchunks] = __ldcg(pr);
        pl[t / a.nchunks][t % a.nchunks] = __ldcg(pr + 1);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < np * a.nchunks; t += blockDim.x) {      // the chunk's weight
        const int r = t / a.nchunks, c = t % a.nchunks;
        float M = NEG;
        for (int i = 0; i < a.nchunks; ++i) M = fmaxf(M, pm[r][i]);
        pe[r][c] = pm[r][c] == NEG ? 0.f : expf(pm[r][c] - M);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < np * DV; t += blockDim.x) {
        const int r = t / DV, d = t % DV, p = p0 + r, hq = g * group + p % group, i1 = p / group;
        if (t != threadIdx.x) load(t);
        float S = 0.f, A = 0.f;
        #pragma unroll
        for (int c = 0; c < FA_MAXC; ++c)
            if (c < a.nchunks) { S += pl[r][c] * pe[r][c]; A += ac[c] * pe[r][c]; }
        *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = S > 0.f ? A / S : 0.f;
    }
}

// CL: 1, or FA_CL (sm_90 on): the FA_CL chunks of (blockIdx.y, z) are one cluster, merged through their shared memory
template <int D, int DV, int RB, int CL, typename TK, typename TV> __device__ void fa_vec_k(const FaArgs& a) {
    static_assert(D == DV, "fa_vec_k: a lane takes the same 8 elements of q, K and V");
    // lanes of a key, keys a warp reads at once, keys a lane group takes a pass
    constexpr int L = D / 8, KPI = 32 / L, NB = FA_NB;
    constexpr int W = FA_WARPS, G = W * KPI;                // warps, keys a block takes one per lane group
    __shared__ float wm[W][RB], wl[W][RB];
    __shared__ __align__(16) float wacc[W][RB][DV];
    fa_cluster_start<W, RB, DV, CL>();
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % L, slot = lane / L;
    const int group = a.h / a.hk, g = blockIdx.y % a.hk, i3 = blockIdx.y / a.hk;
    const int p0 = blockIdx.z * RB, np = min(RB, group * a.n - p0);     // pairs p: head g group + p % group, row p / group
    const char* kb = a.k + g * a.ks[1] + (i3 / a.sr) * a.ks[2];
    const char* vb = a.v + g * a.vs[1] + (i3 / a.sr) * a.vs[2];
    int c0 = blockIdx.x * a.chunk, c1 = min(a.nkv, c0 + a.chunk);
    // (heads of 256: none, their chunks' keys are fa_live's, read from the mask after the wait)
    fa_prefetch_wait(kb, a.ks[0], FaRow<TK>::bytes(D), vb, a.vs[0], FaRow<TV>::bytes(D), c0, D == 256 ? c0 : c1);
    const float qscale = a.softcap > 0.f ? a.scale / a.softcap : a.scale;
    const char* mrow[RB];
    float q[RB][8], slope[RB], m[RB], l[RB], acc[RB][8];
    #pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int p = p0 + r, hq = g * group + p % group;
        const char* qr = a.q + (p / group) * a.qs[0] + hq * a.qs[1] + i3 * a.qs[2] + sub * 32;
        #pragma unroll
        for (int i = 0; i < 8; ++i) q[r][i] = r < np ? *(const float*)(qr + 4 * i) * qscale : 0.f;
        mrow[r] = a.mask && r < np ? a.mask + (p / group) * a.ms[0] + (hq % a.mh) * a.ms[1] + (i3 % a.mw) * a.ms[2] : 0;
        slope[r] = a.m0 == 1.f && a.m1 == 1.f ? 1.f : fa_slope(a, hq);      // no ALiBi: no powf
        m[r] = NEG; l[r] = 0.f;
        #pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][i] = 0.f;
    }
    if constexpr (D == 256) {                               // the live keys split in the chunks (multiples of G)
        if (a.mask) {
            int lo, hi;
            fa_live<RB>(a, mrow, lo, hi);
            const int per = (hi - lo + a.nchunks * G - 1) / (a.nchunks * G) * G;
            c0 = min(hi, lo + (int)blockIdx.x * per); c1 = min(hi, c0 + per);
        }
    }
    const int jl = warp * KPI + slot;
    FaLd<TK> kr[NB];
    FaLd<TV> vr[NB];
    unsigned mb[RB][NB];                                    // the mask's bits
    fa_issue<RB, NB, G>(a, kb, vb, mrow, c0 + jl, c1, sub, kr, vr, mb);
    for (int t0 = c0; t0 < c1; t0 += NB * G) {              // a pass: the next pass's loads, then this one's math
        FaLd<TK> kn[NB];
        FaLd<TV> vn[NB];
        unsigned mn[RB][NB];
        fa_issue<RB, NB, G>(a, kb, vb, mrow, t0 + NB * G + jl, c1, sub, kn, vn, mn);
        float x[RB][NB];                                    // the scores, then P
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            float kx[8];
            kr[t].get(kx);
            #pragma unroll
            for (int r = 0; r < RB; ++r) {
                float s = 0.f;
                #pragma unroll
                for (int i = 0; i < 8; ++i) s = fmaf(q[r][i], kx[i], s);
                #pragma unroll
                for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                x[r][t] = s;
            }
        }
        if (a.softcap > 0.f) {
            #pragma unroll
            for (int r = 0; r < RB; ++r)
                #pragma unroll
                for (int t = 0; t < NB; ++t) x[r][t] = fa_softcap(a.softcap, x[r][t]);
        }
        #pragma unroll
        for (int r = 0; r < RB; ++r) {                      // the mask, then the lane group's online softmax
            float mx = m[r];
            #pragma unroll
            for (int t = 0; t < NB; ++t) {
                const float mv = a.mask_f16 ? to_f((half_t)mb[r][t]) : __uint_as_float(mb[r][t]);
                x[r][t] = t0 + jl + t * G < c1 && r < np ? x[r][t] + slope[r] * mv : NEG;
                mx = fmaxf(mx, x[r][t]);
            }
            const float c = m[r] == NEG ? 0.f : __expf(m[r] - mx);
            l[r] *= c;
            #pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] *= c;
            m[r] = mx;
            #pragma unroll
            for (int t = 0; t < NB; ++t) {
                x[r][t] = x[r][t] == NEG ? 0.f : __expf(x[r][t] - mx);
                l[r] += x[r][t];
            }
        }
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            float vx[8];
            vr[t].get(vx);
            #pragma unroll
            for (int r = 0; r < RB; ++r)
                #pragma unroll
                for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(x[r][t], vx[i], acc[r][i]);
        }
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            kr[t] = kn[t]; vr[t] = vn[t];
            #pragma unroll
            for (int r = 0; r < RB; ++r) mb[r][t] = mn[r][t];
        }
    }
    #pragma unroll
    for (int o = L; o < 32; o <<= 1) {                      // the warp's lane groups merged
        #pragma unroll
        for (int r = 0; r < RB; ++r) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[r], o), lo = __shfl_xor_sync(0xffffffffu, l[r], o);
            const float mn = fmaxf(m[r], mo);
            const float c = m[r] == NEG ? 0.f : __expf(m[r] - mn), co = mo == NEG ? 0.f : __expf(mo - mn);
            l[r] = l[r] * c + lo * co;
            #pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] = acc[r][i] * c + __shfl_xor_sync(0xffffffffu, acc[r][i], o) * co;
            m[r] = mn;
        }
    }
    if (lane < L) {
        #pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (lane == 0) { wm[warp][r] = m[r]; wl[warp][r] = l[r]; }
            *(float4*)&wacc[warp][r][sub * 8] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            *(float4*)&wacc[warp][r][sub * 8 + 4] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        }
    }
    fa_finish<W, RB, DV, CL>(a, wm, wl, wacc, np, p0, g, i3);
}

template <int DV> __device__ void fa_combine_k(const FaArgs& a) {
    for (int d = threadIdx.x; d < DV; d += blockDim.x) fa_combine_row<DV>(a, blockIdx.x, d);
}
