// Q2_K: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, glu
// twins). An 84-byte 256-block: 16 scale bytes (4-bit scale, 4-bit min above it), one per 16 values; 64 bytes of 2-bit
// quants; f16 d at 80, dmin at 82. Value 128h + 32j + l (l < 32): bits 2j of byte 16 + 32h + l, group 8h + 2j + l / 16,
// d * scale * q - dmin * min.
#include "quant_mmvq.cuh"

struct dq_q2_k { static __device__ void at8(const char* r, i64, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * 84;
    const int j0 = (c & 31) << 3, h = j0 >> 7, j = (j0 >> 5) & 3, l0 = j0 & 31;
    const int sc = b[8 * h + 2 * j + (l0 >> 4)];
    const float d = half_at((const char*)b + 80) * (float)(sc & 15), m = half_at((const char*)b + 82) * (float)(sc >> 4);
    const unsigned char* q = b + 16 + 32 * h + l0;
    #pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = d * (float)((q[k] >> (2 * j)) & 3) - m;
} };

// a unit is the 32 values 128h + 32j .. + 31 of a block (u & 7 = 4h + j): two groups of 16, their minus terms
// dmin * min * (sum of the 16 activations) from a dot product with ones. Blocks are 2-byte aligned (words_at2)
struct mq_q2_k {
    static constexpr int UNIT = 32, BYTES = 84;
    struct W { float d0, d1, m0, m1; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 3) * 84;
        const int h = (u >> 2) & 1, j = u & 3;
        const int s0 = ((const unsigned char*)b)[8 * h + 2 * j], s1 = ((const unsigned char*)b)[8 * h + 2 * j + 1];
        const float d = half_at(b + 80), dmin = half_at(b + 82);
        w.d0 = d * (float)(s0 & 15); w.d1 = d * (float)(s1 & 15);
        w.m0 = dmin * (float)(s0 >> 4); w.m1 = dmin * (float)(s1 >> 4);
        int v[8];
        words_at2<8>(b + 16 + 32 * h, v);
        #pragma unroll
        for (int i = 0; i < 8; ++i) w.q[i] = (v[i] >> (2 * j)) & 0x03030303;
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
        return ds[0].x * (w.d0 * (float)dp4<4>(w.q, x) + w.d1 * (float)dp4<4>(w.q + 4, x + 4)
                          - w.m0 * (float)dp4<4>(ones, x) - w.m1 * (float)dp4<4>(ones, x + 4));
    }
};

MMVQ_DECLARE(q2_k)

extern "C" __global__ void get_rows_q2_k(const Args a) { grid_dependency(); get_rows_q_k<dq_q2_k>(a); }
extern "C" __global__ void copy_q2_k_f32(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, float>(a); }
extern "C" __global__ void mmv_q2_k_f32(const Args a) { grid_dependency(); mmv_k<dq_q2_k, float>(a); }
extern "C" __global__ void copy_q2_k_f16(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, half_t>(a); }
extern "C" __global__ void mmv_q2_k_f16(const Args a) { grid_dependency(); mmv_k<dq_q2_k, half_t>(a); }
extern "C" __global__ void copy_q2_k_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, bf16_t>(a); }
extern "C" __global__ void mmv_q2_k_bf16(const Args a) { grid_dependency(); mmv_k<dq_q2_k, bf16_t>(a); }
extern "C" __global__ void mmvq_q2_k(const Args a) { mmvq_entry<mq_q2_k, false, false>(a); }
extern "C" __global__ void mmvq_glu_q2_k(const Args a) { mmvq_entry<mq_q2_k, true, false>(a); }
extern "C" __global__ void mmvq_s_q2_k(const Args a) { mmvq_entry<mq_q2_k, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q2_k(const Args a) { mmvq_entry<mq_q2_k, true, true>(a); }
