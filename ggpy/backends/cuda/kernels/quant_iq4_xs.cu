// IQ4_XS: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s,
// glu twins). A 136-byte 256-block: f16 d, uint16 of the 8 sub-blocks' high scale bits (2 each) at 2, their low
// nibbles in the 4 bytes at 4, then 16 bytes of nibbles per sub-block of 32 at 8 (quant_iq4.cuh); value
// d * (scale - 32) * kvalues[nibble].
#include "quant_iq4.cuh"

// d * (scale - 32) of sub-block ib of the block at b
__device__ __forceinline__ float iq4_xs_scale(const unsigned char* b, int ib) {
    const int high = ((b[2] | b[3] << 8) >> (2 * ib)) & 3, low = (b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
    return half_at((const char*)b) * (float)((low | high << 4) - 32);
}

struct dq_iq4_xs { static __device__ void at8(const char* r, i64, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * 136;
    const int j0 = (c & 31) << 3, ib = j0 >> 5, l0 = j0 & 31;
    iq4_at8(b + 8 + 16 * ib + (l0 & 15), (l0 >> 4) << 2, iq4_xs_scale(b, ib), v);
} };

// a unit is one sub-block of 32 (u & 7); blocks are 2-byte aligned (words_at2)
struct mq_iq4_xs {
    static constexpr int UNIT = 32, BYTES = 136;
    struct W { float d; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 3) * 136;
        const int ib = u & 7;
        w.d = iq4_xs_scale((const unsigned char*)b, ib);
        int v[4];
        words_at2<4>(b + 8 + 16 * ib, v);
        iq4_lookup32(v, w.q);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        return w.d * ds[0].x * (float)dp4<8>(w.q, x);
    }
};

MMVQ_DECLARE(iq4_xs)

extern "C" __global__ void get_rows_iq4_xs(const Args a) { grid_dependency(); get_rows_q_k<dq_iq4_xs>(a); }
extern "C" __global__ void copy_iq4_xs_f32(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, float>(a); }
extern "C" __global__ void mmv_iq4_xs_f32(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, float>(a); }
extern "C" __global__ void copy_iq4_xs_f16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, half_t>(a); }
extern "C" __global__ void mmv_iq4_xs_f16(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, half_t>(a); }
extern "C" __global__ void copy_iq4_xs_bf16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, bf16_t>(a); }
extern "C" __global__ void mmv_iq4_xs_bf16(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, bf16_t>(a); }
extern "C" __global__ void mmvq_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, false, false>(a); }
extern "C" __global__ void mmvq_glu_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, true, false>(a); }
extern "C" __global__ void mmvq_s_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, true, true>(a); }
