// mul_mat_id for prompts (kernels/moe.py's `grouped`): the slots (e, t) of ids sorted by expert once a node
// (moe_sort), then a block per (tile of at most MOE_TN slots that chose one expert, MOE_TM rows of it): the rows are
// dequantized into shared memory once for all the tile's slots (mul_mat's tile GEMM, F32 accumulation) instead of
// once a slot. dst F32 (M, U, T), src0 the experts (K, M, n_expert), src1 b F32 (K, B1, T) (column e % B1, t).
//
// The temp block (src1 of moe_sort, src2 of mm_id_<as>): S = U T ints, the slots e + U t grouped by expert, then
// ip[1] tiles of 3 ints (expert, first index into the slots, slots: 0 for a tile past the last).
#include "quant_iq4.cuh"
#include "quant_q23_k.cuh"

#define MOE_TM 64               // rows of the expert a block
#define MOE_TN 64               // slots a tile (moe.py's GROUPED_TN)
#define MOE_TK 32               // K a step
#define MOE_MAX_EXPERTS 1024    // moe.py's GROUPED_MAX_EXPERTS
#define SORT_BOUNDS __launch_bounds__(1024)
#define TILE_BOUNDS __launch_bounds__(256)

// one block of 1024 threads: count each expert's slots, lay out the tiles, list the slots by expert; a slot whose
// expert is outside [0, ip[0]) gets zeros in dst and no tile. src0 ids (I32 (U, T), its strides nb0).
extern "C" __global__ void SORT_BOUNDS moe_sort(const Args a) {
    grid_dependency();
    __shared__ int count[MOE_MAX_EXPERTS], first[MOE_MAX_EXPERTS];
    const int n_expert = a.ip[0], max_tiles = a.ip[1];
    const i64 U = a.ne0[0], S = a.ne0[0] * a.ne0[1];
    int* list = (int*)a.src1;
    int* tiles = list + S;
    for (int x = threadIdx.x; x < n_expert; x += blockDim.x) count[x] = 0;
    for (int x = threadIdx.x; x < 3 * max_tiles; x += blockDim.x) tiles[x] = 0;
    __syncthreads();
    for (i64 s = threadIdx.x; s < S; s += blockDim.x) {
        const i64 e = s % U, t = s / U;
        const int x = *(const int*)(a.src0 + e * a.nb0[0] + t * a.nb0[1]);
        if (x >= 0 && x < n_expert) atomicAdd(&count[x], 1);
        else for (i64 m = 0; m < a.ne[0]; ++m) *(float*)(a.dst + m * a.nb[0] + e * a.nb[1] + t * a.nb[2]) = 0.f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int start = 0, tile = 0;
        for (int x = 0; x < n_expert; ++x) {
            first[x] = start;
            for (int j = 0; j < count[x]; j += MOE_TN, ++tile) {
                tiles[3 * tile] = x;
                tiles[3 * tile + 1] = start + j;
                tiles[3 * tile + 2] = min(MOE_TN, count[x] - j);
            }
            start += count[x];
            count[x] = 0;
        }
    }
    __syncthreads();
    for (i64 s = threadIdx.x; s < S; s += blockDim.x) {
        const int x = *(const int*)(a.src0 + (s % U) * a.nb0[0] + (s / U) * a.nb0[1]);
        if (x >= 0 && x < n_expert) list[first[x] + atomicAdd(&count[x], 1)] = (int)s;
    }
}

// a block of 256 threads: thread (tx, ty) = (tid % 16, tid / 16) sums rows m0 + tx + 16 i and the tile's slots
// ty + 16 j (i, j < 4); a step loads MOE_TK of K: each thread dequantizes 8 values of one row (Q::at8) and copies 8
// of b's values. ip[0] = S (where the tiles start in src2).
template <typename Q> __device__ void mm_id_k(const Args& a) {
    __shared__ float as[MOE_TK][MOE_TM + 4];
    __shared__ float bs[MOE_TK][MOE_TN + 4];
    __shared__ i64 boff[MOE_TN], doff[MOE_TN];
    const int* tile = (const int*)a.src2 + a.ip[0] + 3 * (i64)blockIdx.x;
    const int n = tile[2];
    if (n == 0) return;
    const int* list = (const int*)a.src2 + tile[1];
    const i64 U = a.ne[1], B1 = a.ne1[1], M = a.ne0[1], m0 = (i64)blockIdx.y * MOE_TM;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4, K = (int)a.ne0[0];
    if (tid < MOE_TN) {
        const i64 s = tid < n ? list[tid] : 0, e = s % U, t = s / U;
        boff[tid] = tid < n ? (e % B1) * a.nb1[1] + t * a.nb1[2] : -1;
        doff[tid] = e * a.nb[1] + t * a.nb[2];
    }
    const int ar = tid >> 2, ag = tid & 3;          // this thread's row of the tile and 8-value group of a step
    const bool row_ok = m0 + ar < M;
    const char* row = a.src0 + (i64)tile[0] * a.nb0[2] + (row_ok ? m0 + ar : 0) * a.nb0[1];
    float acc[4][4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
    __syncthreads();
    for (int k0 = 0; k0 < K; k0 += MOE_TK) {
        float v[8];
        const int c = (k0 >> 3) + ag;
        if (row_ok && 8 * c < K) Q::at8(row, a.nb0[0], c, v);
        else {
            #pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = 0.f;
        }
        #pragma unroll
        for (int j = 0; j < 8; ++j) as[8 * ag + j][ar] = v[j];
        #pragma unroll
        for (int i = 0; i < MOE_TK * MOE_TN / 256; ++i) {
            const int idx = tid + 256 * i, k = idx % MOE_TK, col = idx / MOE_TK;
            bs[k][col] = boff[col] >= 0 && k0 + k < K ? *(const float*)(a.src1 + boff[col] + (i64)(k0 + k) * a.nb1[0])
                                                      : 0.f;
        }
        __syncthreads();
        #pragma unroll 8
        for (int k = 0; k < MOE_TK; ++k) {
            float x[4], y[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) { x[i] = as[k][tx + 16 * i]; y[i] = bs[k][ty + 16 * i]; }
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += x[i] * y[j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int col = ty + 16 * j;
        if (col >= n) continue;
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const i64 m = m0 + tx + 16 * i;
            if (m < M) *(float*)(a.dst + doff[col] + m * a.nb[0]) = acc[i][j];
        }
    }
}

extern "C" __global__ void TILE_BOUNDS mm_id_f32(const Args a) { grid_dependency(); mm_id_k<dq_float<float> >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_f16(const Args a) { grid_dependency(); mm_id_k<dq_float<half_t> >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_bf16(const Args a) { grid_dependency(); mm_id_k<dq_float<bf16_t> >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q4_0(const Args a) { grid_dependency(); mm_id_k<dq_q4_0 >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q4_1(const Args a) { grid_dependency(); mm_id_k<dq_q4_1 >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q5_0(const Args a) { grid_dependency(); mm_id_k<dq_q5_0 >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q5_1(const Args a) { grid_dependency(); mm_id_k<dq_q5_1 >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q8_0(const Args a) { grid_dependency(); mm_id_k<dq_q8_0 >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q2_k(const Args a) { grid_dependency(); mm_id_k<dq_q2_k >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q3_k(const Args a) { grid_dependency(); mm_id_k<dq_q3_k >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q4_k(const Args a) { grid_dependency(); mm_id_k<dq_q4_k >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q5_k(const Args a) { grid_dependency(); mm_id_k<dq_q5_k >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_q6_k(const Args a) { grid_dependency(); mm_id_k<dq_q6_k >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_iq4_nl(const Args a) { grid_dependency(); mm_id_k<dq_iq4_nl >(a); }
extern "C" __global__ void TILE_BOUNDS mm_id_iq4_xs(const Args a) { grid_dependency(); mm_id_k<dq_iq4_xs >(a); }
