// The norm_mat_vec pattern (kernels/matmul.py): rms_norm(x) * w read only by mat-vecs of quantized weights. Small
// products: norm_mmvq[_glu], one launch, every block normalising x's N columns, scaling them by w and quantizing them
// to q8_1 in shared memory, then a warp per row across the products (a row index says which weight and result; a
// product's weight type is a runtime switch); big ones, and more than MMV_MAX_N columns: rms_norm_mul_q8_1[_b] into the
// q8_1 layout of mmvq's temp block, then each product's mmvq[_b] from it. norm_mmvq_rope: norm_mmvq of q, k, v with
// the rope_kv after them (the norm_rope_kv pattern); mmvq_rope: the same after rms_norm_mul_q8_1 (big products).
#include "quant_mmvq.cuh"
#include "rope.cuh"

#define NMV_MAX 4                       // products of one launch (llama's q, k, v)

struct NormVecArgs {
    Args a;                             // src0: x F32 (K, N) by nb0; src1: the norm's weight (F32, K); p0: eps
    const char* mat[NMV_MAX];           // each product's weight rows (GLU: the gate's; the up's at mat[1])
    char* out[NMV_MAX];                 // its result, F32 (M, N) contiguous (GLU: silu(gate x) * (up x))
    i64 nb1[NMV_MAX];                   // its weight's row stride
    int end[NMV_MAX];                   // past its last row, counting the rows of the products before it
    int type[NMV_MAX];                  // its weight's type: 0..7 = Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
};

// x's N columns RMS-normalised and scaled by w, as q8_1 (quantize_cols' layout) by the whole block: every thread
// sums the squares of its elements of each column (all loads at once), the warps' sums added in shared memory
// (x (K, N) F32 at x by nbk, nbn, w F32 (K), eps: Args' src0, src1, p0); wait: the grid wait first (PDL); early: w a
// model weight, its lines this block scales asked into L1 before that wait; of `shares` blocks (each summing the whole
// columns), this one quantizes its share `share`; N <= NM columns
template <int NM = MMV_MAX_N> __device__ __forceinline__ void norm_q8_1(bool wait, bool early, const char* x, i64 nbk,
        i64 nbn, int K, int N, const float* w, float eps, signed char* q, float2* ds, int share = 0, int shares = 1) {
    __shared__ float part[32][NM], inv[NM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (early) {                        // a 32-block of w is a 128-byte line: lane l the warp's l-th of quantize_cols'
        const int b = warp + share * warps + lane * warps * shares;
        if (b < N * (K >> 5)) asm volatile("prefetch.global.L1 [%0];" :: "l"(w + b % (K >> 5) * 32));
    }
    if (wait) grid_dependency();
#define NMV_X(k, n) (*(const float*)(x + (i64)(k) * nbk + (i64)(n) * nbn))
    float s[NM];
    #pragma unroll
    for (int n = 0; n < NM; ++n) s[n] = 0.f;
    if constexpr (NM > MMV_MAX_N) {             // a batch: every column's loads of an element at once (one round trip)
        for (int k = threadIdx.x; k < K; k += blockDim.x) {
            #pragma unroll
            for (int n = 0; n < NM; ++n) { const float v = n < N ? NMV_X(k, n) : 0.f; s[n] += v * v; }
        }
    } else {
        #pragma unroll
        for (int n = 0; n < NM; ++n) {
            if (n >= N) continue;
            #pragma unroll 8
            for (int k = threadIdx.x; k < K; k += blockDim.x) { const float v = NMV_X(k, n); s[n] += v * v; }
        }
    }
    #pragma unroll
    for (int n = 0; n < NM; ++n) {
        if (n >= N) break;
        for (int o = 16; o > 0; o >>= 1) s[n] += __shfl_xor_sync(0xffffffffu, s[n], o);
        if (lane == 0) part[warp][n] = s[n];
    }
    __syncthreads();
    if (threadIdx.x < N) {
        float t = 0.f;
        for (int i = 0; i < warps; ++i) t += part[i][threadIdx.x];
        inv[threadIdx.x] = rsqrtf(t / (float)K + eps);
    }
    __syncthreads();
    quantize_cols(K, N, [&](int k, int n) { return NMV_X(k, n) * inv[n] * w[k]; }, q, ds, share, shares);
    __syncthreads();
}

// a warp per row m over the products' rows (contiguous weights: a row's bytes are its stride), asked into L1 before
// the block quantizes x (their latencies overlap); iop MMVQ_WEIGHTS: every weight a model weight (mmvq_k), asked
// before the grid wait too
template <bool GLU> __device__ void norm_mmvq_k(const NormVecArgs& p) {
    const int K = (int)p.a.ne0[0], N = (int)p.a.ne0[1], lane = threadIdx.x & 31;
    const int m = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const bool early = p.a.iop & MMVQ_WEIGHTS;
    if (!early) grid_dependency();
    int j = 0;
    while (j < NMV_MAX - 1 && m >= p.end[j]) ++j;
    const int first = j ? p.end[j - 1] : 0, r = m - first, M = p.end[j] - first;
    const char* row = p.mat[j] + r * p.nb1[j];
    const char* urow = GLU ? p.mat[1] + r * p.nb1[1] : nullptr;
    if (m < p.end[j]) {
        prefetch_row(row, p.nb1[j]);
        if (GLU) prefetch_row(urow, p.nb1[1]);
    }
    signed char* sq = (signed char*)mmvq_shared;
    float2* sds = (float2*)(sq + N * K);
    norm_q8_1(early, early, p.a.src0, p.a.nb0[0], p.a.nb0[1], K, N, (const float*)p.a.src1, p.a.p0, sq, sds);
    float* out = (float*)p.out[j];
    auto put = [&](int, int n, float v, float g) { if (lane == 0) out[r + (i64)n * M] = GLU ? silu_mul(v, g) : v; };
#define NMV_CASE(i, Q) case i: \
    mmvq_rows<Q, GLU, 1, 1, MMV_MAX_N>(row, urow, 0, m < p.end[j], sq, sds, K, N, [] {}, put); break;
    switch (p.type[j]) {
        NMV_CASE(0, mq_q4_0) NMV_CASE(1, mq_q4_1) NMV_CASE(2, mq_q5_0) NMV_CASE(3, mq_q5_1)
        NMV_CASE(4, mq_q8_0) NMV_CASE(5, mq_q4_k) NMV_CASE(6, mq_q5_k) NMV_CASE(7, mq_q6_k)
    }
}

extern "C" {
__global__ void MMVQ_BOUNDS(true) norm_mmvq(const NormVecArgs p);
__global__ void MMVQ_BOUNDS(true) norm_mmvq_glu(const NormVecArgs p);
}
extern "C" __global__ void norm_mmvq(const NormVecArgs p) { norm_mmvq_k<false>(p); }
extern "C" __global__ void norm_mmvq_glu(const NormVecArgs p) { norm_mmvq_k<true>(p); }
// norm_mmvq_rope: norm_mmvq of q, k, v (products 0, 1, 2) and the rope_kv after them (kernels/matmul.py's
// norm_rope_kv_run); mmvq_rope: the same from rms_norm_mul_q8_1's columns. A warp per pair of a product's rows (pairs
// in row order; every product's rows even): rows the
// rope rotates together ((2i, 2i + 1), NEOX (i, i + n_dims / 2) of a head of q or k, rotated by rope_cos_sin at each
// token's position), else adjacent rows (v's; a head's rows past n_dims); token n's pair goes to row n (q: the q rope's
// memory) or idx[n] (k, v: their cache's, skipped out of range) of out[j] at onb[j] a row, element r at r times its size
struct NormRopeArgs {
    NormVecArgs v;                      // out: the q rope's memory (F32), the K cache, the V cache
    Args rope;                          // the q rope's (the k rope's the same): ne[0] head size, src1 positions, iop NEOX
    const char* idx; i64 idx_nb;        // the caches' I32 row indices and their byte stride
    i64 onb[3], rows[3];                // each output's row stride and row count (q: its tokens)
    int type[3];                        // each output's type: 0 F32, 1 F16, 2 BF16
};

__device__ __forceinline__ void store_as(char* p, int type, float v) {
    if (type == 0) *(float*)p = v;
    else if (type == 1) *(half_t*)p = from_f<half_t>(v);
    else *(bf16_t*)p = from_f<bf16_t>(v);
}

// Q8 (mmvq_rope): x's q8_1 columns at v.a.src0, else (norm_mmvq_rope) every block normalises and quantizes x itself
template <bool Q8> __device__ void norm_mmvq_rope_k(const NormRopeArgs& a) {
    const NormVecArgs& p = a.v;
    const int K = (int)p.a.ne0[0], N = (int)p.a.ne0[1], lane = threadIdx.x & 31;
    const int m = 2 * (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
    const bool early = p.a.iop & MMVQ_WEIGHTS, ok = m < p.end[2];
    if (!early) grid_dependency();
    int j = 0;
    while (j < 2 && m >= p.end[j]) ++j;
    const int u = (m - (j ? p.end[j - 1] : 0)) / 2, hd = (int)a.rope.ne[0], half = a.rope.ip[0] / 2, i = u % (hd / 2);
    const bool rot = j < 2 && i < half, neox = rot && a.rope.iop;
    const int r0 = neox ? u / (hd / 2) * hd + i : 2 * u, d = neox ? half : 1;
    const char* row = p.mat[j] + (i64)r0 * p.nb1[j];
    if (ok) {
        prefetch_row(row, p.nb1[j]);
        prefetch_row(row + d * p.nb1[j], p.nb1[j]);
    }
    const signed char* sq = (const signed char*)(Q8 ? (const void*)p.a.src0 : (const void*)mmvq_shared);
    const float2* sds = (const float2*)(sq + N * K);
    if (Q8 && early) grid_dependency();
    if (!Q8) norm_q8_1(early, early, p.a.src0, p.a.nb0[0], p.a.nb0[1], K, N, (const float*)p.a.src1, p.a.p0,
                       (signed char*)mmvq_shared, (float2*)sds);
    float y[2][MMV_MAX_N];
    auto put = [&](int r, int n, float v, float) { y[r][n] = v; };
#define NMR_CASE(t, Q) case t: \
    mmvq_rows<Q, false, 1, 2, MMV_MAX_N>(row, nullptr, d * p.nb1[j], ok ? 2 : 0, sq, sds, K, N, [] {}, put); break;
    switch (p.type[j]) {
        NMR_CASE(0, mq_q4_0) NMR_CASE(1, mq_q4_1) NMR_CASE(2, mq_q5_0) NMR_CASE(3, mq_q5_1)
        NMR_CASE(4, mq_q8_0) NMR_CASE(5, mq_q4_k) NMR_CASE(6, mq_q5_k) NMR_CASE(7, mq_q6_k)
    }
    if (!ok) return;
    #pragma unroll
    for (int n = 0; n < MMV_MAX_N; ++n) {
        if (n >= N) break;
        if (lane != n) continue;
        float x0 = y[0][n], x1 = y[1][n];
        if (rot) {
            float cs, sn;
            rope_cos_sin(a.rope, *(const int*)(a.rope.src1 + n * a.rope.nb1[0]), i, cs, sn);
            const float t = x0 * cs - x1 * sn;
            x1 = x0 * sn + x1 * cs;
            x0 = t;
        }
        const i64 r = j ? *(const int*)(a.idx + n * a.idx_nb) : n, size = a.type[j] ? 2 : 4;
        if (r < 0 || r >= a.rows[j]) continue;
        store_as(p.out[j] + r * a.onb[j] + r0 * size, a.type[j], x0);
        store_as(p.out[j] + r * a.onb[j] + (r0 + d) * size, a.type[j], x1);
    }
}

extern "C" {
__global__ void MMVQ_BOUNDS(true) norm_mmvq_rope(const NormRopeArgs a);
__global__ void MMVQ_BOUNDS(false) mmvq_rope(const NormRopeArgs a);
}
extern "C" __global__ void norm_mmvq_rope(const NormRopeArgs a) { norm_mmvq_rope_k<false>(a); }
extern "C" __global__ void mmvq_rope(const NormRopeArgs a) { norm_mmvq_rope_k<true>(a); }

// dst: the q8_1 columns (N K int8, then N K / 32 (d, d sum q)); the blocks share the 32-blocks to quantize; _b: the
// batch products' N <= MMVQ_MAX_BATCH columns (mmvq_b from it)
template <int NM> __device__ __forceinline__ void rms_norm_mul_q8_1_k(const Args& a) {
    norm_q8_1<NM>(true, a.iop & MMVQ_WEIGHTS, a.src0, a.nb0[0], a.nb0[1], (int)a.ne0[0], (int)a.ne0[1],
                  (const float*)a.src1, a.p0,
                  (signed char*)a.dst, (float2*)(a.dst + a.ne0[0] * a.ne0[1]), blockIdx.x, gridDim.x);
}
extern "C" __global__ void rms_norm_mul_q8_1(const Args a) { rms_norm_mul_q8_1_k<MMV_MAX_N>(a); }
extern "C" __global__ void rms_norm_mul_q8_1_b(const Args a) { rms_norm_mul_q8_1_k<MMVQ_MAX_BATCH>(a); }
