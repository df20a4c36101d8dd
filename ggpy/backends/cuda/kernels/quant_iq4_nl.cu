// IQ4_NL: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s,
// glu twins). An 18-byte 32-block: f16 d, 16 bytes of nibbles (quant_iq4.cuh); value d * kvalues[nibble].
#include "quant_iq4.cuh"

struct dq_iq4_nl { static __device__ void at8(const char* r, i64, int c, float* v) {
    const char* b = r + (c >> 2) * 18;
    const int j0 = (c & 3) << 3;
    iq4_at8((const unsigned char*)b + 2 + (j0 & 15), (j0 >> 4) << 2, half_at(b), v);
} };

// a unit is one block; blocks are 2-byte aligned
struct mq_iq4_nl {
    static constexpr int UNIT = 32, BYTES = 8 * 18;
    struct W { float d; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)u * 18;
        w.d = half_at(b);
        int v[4];
        words_at2<4>(b + 2, v);
        iq4_lookup32(v, w.q);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        return w.d * ds[0].x * (float)dp4<8>(w.q, x);
    }
};

MMVQ_DECLARE(iq4_nl)

extern "C" __global__ void get_rows_iq4_nl(const Args a) { grid_dependency(); get_rows_q_k<dq_iq4_nl>(a); }
extern "C" __global__ void copy_iq4_nl_f32(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, float>(a); }
extern "C" __global__ void mmv_iq4_nl_f32(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, float>(a); }
extern "C" __global__ void copy_iq4_nl_f16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, half_t>(a); }
extern "C" __global__ void mmv_iq4_nl_f16(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, half_t>(a); }
extern "C" __global__ void copy_iq4_nl_bf16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, bf16_t>(a); }
extern "C" __global__ void mmv_iq4_nl_bf16(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, bf16_t>(a); }
extern "C" __global__ void mmvq_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, false, false>(a); }
extern "C" __global__ void mmvq_glu_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, true, false>(a); }
extern "C" __global__ void mmvq_s_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, true, true>(a); }
