// Q2_K and Q3_K (quant_q2_k.cu, quant_q3_k.cu; their block layouts there): the dequantizing functors dq_<type> and the
// integer-dot-product units mq_<type> (quant_mmvq.cuh's interface), shared with mul_mat_id (moe.cu).
#pragma once
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

// scale s: its low nibble from byte s % 8 (high nibble for s >= 8), its 2 high bits at 2 (s / 4) of byte 8 + s % 4
__device__ __forceinline__ int q3_k_scale(const unsigned char* sc, int s) {
    return (((sc[s & 7] >> (4 * (s >> 3))) & 15) | (((sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3) << 4)) - 32;
}

struct dq_q3_k { static __device__ void at8(const char* r, i64, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * 110;
    const int j0 = (c & 31) << 3, h = j0 >> 7, j = (j0 >> 5) & 3, l0 = j0 & 31;
    const float d = half_at((const char*)b + 108) * (float)q3_k_scale(b + 96, 8 * h + 2 * j + (l0 >> 4));
    const unsigned char* q = b + 32 + 32 * h + l0;
    #pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = d * (float)(((q[k] >> (2 * j)) & 3) - (((b[l0 + k] >> (4 * h + j)) & 1) ? 0 : 4));
} };

// a unit is the 32 values 128h + 32j .. + 31 of a block (u & 7 = 4h + j), two groups of 16; blocks are 2-byte aligned
struct mq_q3_k {
    static constexpr int UNIT = 32, BYTES = 110;
    struct W { float d0, d1; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 3) * 110;
        const int h = (u >> 2) & 1, j = u & 3;
        const float d = half_at(b + 108);
        w.d0 = d * (float)q3_k_scale((const unsigned char*)b + 96, 8 * h + 2 * j);
        w.d1 = d * (float)q3_k_scale((const unsigned char*)b + 96, 8 * h + 2 * j + 1);
        int l[8], m[8];
        words_at2<8>(b + 32 + 32 * h, l);
        words_at2<8>(b, m);
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            w.q[i] = __vsubss4((l[i] >> (2 * j)) & 0x03030303, ((~m[i] >> (4 * h + j)) & 0x01010101) << 2);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        return ds[0].x * (w.d0 * (float)dp4<4>(w.q, x) + w.d1 * (float)dp4<4>(w.q + 4, x + 4));
    }
};
