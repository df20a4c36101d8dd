// Q3_K: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, glu
// twins). A 110-byte 256-block: 32 bytes hmask, 64 bytes of 2-bit quants at 32, 12 bytes of 16 6-bit scales at 96,
// f16 d at 108. Value 128h + 32j + l (l < 32): bits 2j of byte 32 + 32h + l, minus 4 where bit 4h + j of hmask byte l
// is 0; group s = 8h + 2j + l / 16, d * (scale_s - 32) * q.
#include "quant_mmvq.cuh"

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

MMVQ_DECLARE(q3_k)

extern "C" __global__ void get_rows_q3_k(const Args a) { grid_dependency(); get_rows_q_k<dq_q3_k>(a); }
extern "C" __global__ void copy_q3_k_f32(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, float>(a); }
extern "C" __global__ void mmv_q3_k_f32(const Args a) { grid_dependency(); mmv_k<dq_q3_k, float>(a); }
extern "C" __global__ void copy_q3_k_f16(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, half_t>(a); }
extern "C" __global__ void mmv_q3_k_f16(const Args a) { grid_dependency(); mmv_k<dq_q3_k, half_t>(a); }
extern "C" __global__ void copy_q3_k_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, bf16_t>(a); }
extern "C" __global__ void mmv_q3_k_bf16(const Args a) { grid_dependency(); mmv_k<dq_q3_k, bf16_t>(a); }
extern "C" __global__ void mmvq_q3_k(const Args a) { mmvq_entry<mq_q3_k, false, false>(a); }
extern "C" __global__ void mmvq_glu_q3_k(const Args a) { mmvq_entry<mq_q3_k, true, false>(a); }
extern "C" __global__ void mmvq_s_q3_k(const Args a) { mmvq_entry<mq_q3_k, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q3_k(const Args a) { mmvq_entry<mq_q3_k, true, true>(a); }
