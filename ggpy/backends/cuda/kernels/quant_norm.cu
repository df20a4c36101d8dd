// The norm_mat_vec pattern (kernels/matmul.py): rms_norm(x) * w read only by mat-vecs of quantized weights. Small
// products: norm_mmvq[_glu], one launch, every block normalising x's N columns, scaling them by w and quantizing them
// to q8_1 in shared memory, then a warp per row across the products (a row index says which weight and result; a
// product's weight type is a runtime switch); big ones: rms_norm_mul_q8_1 into the q8_1 layout of mmvq's temp block,
// then each product's mmvq from it.
#include "quant_mmvq.cuh"

#define NMV_MAX 4                       // products of one launch (llama's q, k, v)

struct NormVecArgs {
    Args a;                             // src0: x F32 (K, N) by nb0; src1: the norm's weight (F32, K); p0: eps
    const char* mat[NMV_MAX];           // each product's weight rows (GLU: the gate's; the up's at mat[1])
    char* out[NMV_MAX];                 // its result, F32 (M, N) contiguous (GLU: silu(gate x) * (up x))
    i64 nb1[NMV_MAX];                   // its weight's row stride
    int end[NMV_MAX];                   // past its last row, counting the rows of the products before it
    int type[NMV_MAX];                  // its weight's type: 0..7 = Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
};

// x's N columns RMS-normalised and scaled by w, as q8_1 (quantize_cols' layout) by the whole block
__device__ __forceinline__ void norm_q8_1(const Args& a, signed char* q, float2* ds) {
    __shared__ float inv[MMV_MAX_N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int K = (int)a.ne0[0], N = (int)a.ne0[1];
#define NMV_X(k, n) (*(const float*)(a.src0 + (i64)(k) * a.nb0[0] + (i64)(n) * a.nb0[1]))
    for (int n = warp; n < N; n += warps) {
        float s = 0.f;
        for (int k = lane; k < K; k += 32) { const float x = NMV_X(k, n); s += x * x; }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) inv[n] = rsqrtf(s / (float)K + a.p0);
    }
    __syncthreads();
    const float* w = (const float*)a.src1;
    quantize_cols(K, N, [&](int k, int n) { return NMV_X(k, n) * inv[n] * w[k]; }, q, ds);
}

// a warp per row m over the products' rows (contiguous weights: a row's bytes are its stride), prefetched first
template <bool GLU> __device__ void norm_mmvq_k(const NormVecArgs& p) {
    const int K = (int)p.a.ne0[0], N = (int)p.a.ne0[1], lane = threadIdx.x & 31;
    const int m = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
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
    norm_q8_1(p.a, sq, sds);
    __syncthreads();
    if (m >= p.end[j]) return;
    float* out = (float*)p.out[j];
    auto put = [&](int n, float v, float g) { if (lane == 0) out[r + (i64)n * M] = GLU ? silu_mul(v, g) : v; };
#define NMV_CASE(i, Q) case i: mmvq_row<Q, GLU, 1>(row, urow, sq, sds, K, N, put); break;
    switch (p.type[j]) {
        NMV_CASE(0, mq_q4_0) NMV_CASE(1, mq_q4_1) NMV_CASE(2, mq_q5_0) NMV_CASE(3, mq_q5_1)
        NMV_CASE(4, mq_q8_0) NMV_CASE(5, mq_q4_k) NMV_CASE(6, mq_q5_k) NMV_CASE(7, mq_q6_k)
    }
}

extern "C" __global__ void norm_mmvq(const NormVecArgs p) { grid_dependency(); norm_mmvq_k<false>(p); }
extern "C" __global__ void norm_mmvq_glu(const NormVecArgs p) { grid_dependency(); norm_mmvq_k<true>(p); }
// dst: the q8_1 columns (N K int8, then N K / 32 (d, d sum q)); one block
extern "C" __global__ void rms_norm_mul_q8_1(const Args a) {
    grid_dependency();
    norm_q8_1(a, (signed char*)a.dst, (float2*)(a.dst + a.ne0[0] * a.ne0[1]));
}
