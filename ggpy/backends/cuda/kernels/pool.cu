// pool_2d (max, avg) and upscale (nearest, bilinear, bilinear align-corners): one thread per dst element
// (kernels/pool.py).
#include "common.cuh"

// pool_2d: src0 (W, H, C, N) -> dst F32 (OW, OH, C, N); padded positions never win a max, count as 0 in avg
template <typename T, bool MAX> __device__ void pool_2d(const Args& a) {
    const int k0 = a.ip[0], k1 = a.ip[1], s0 = a.ip[2], s1 = a.ip[3], q0 = a.ip[4], q1 = a.ip[5];
    const i64 IW = a.ne0[0], IH = a.ne0[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* in = a.src0 + c[2] * a.nb0[2] + c[3] * a.nb0[3];
        float r = MAX ? -3.402823466e+38f : 0.f;
        for (i64 y = c[1] * s1 - q1; y < c[1] * s1 - q1 + k1; ++y) {
            if (y < 0 || y >= IH) continue;
            for (i64 x = c[0] * s0 - q0; x < c[0] * s0 - q0 + k0; ++x) {
                if (x < 0 || x >= IW) continue;
                const float v = to_f(*(const T*)(in + x * a.nb0[0] + y * a.nb0[1]));
                r = MAX ? fmaxf(r, v) : r + v;
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = MAX ? r : r / (float)(k0 * k1);
    }
}

// the two neighbours j0, j1 of output index i along an axis of n_in inputs and n_out outputs, and j1's weight,
// in float32 as PyTorch's kernels (and the CPU backend) compute them: scale = n_in / n_out,
// src = fma(scale, i + 0.5, -0.5); align-corners: scale = (n_in - 1) / (n_out - 1), src = scale * i
template <bool ALIGN> __device__ __forceinline__ float linear(i64 i, i64 n_in, i64 n_out, i64& j0, i64& j1) {
    float src;
    if (ALIGN) src = n_out > 1 ? __fmul_rn((float)(n_in - 1) / (float)(n_out - 1), (float)i) : 0.f;
    else src = fmaxf(fmaf((float)n_in / (float)n_out, (float)i + 0.5f, -0.5f), 0.f);
    j0 = min((i64)src, n_in - 1);
    j1 = min(j0 + 1, n_in - 1);
    return fminf(fmaxf(src - (float)j0, 0.f), 1.f);
}

// the source index of output index i as PyTorch's nearest mode: floor(i * (in / out)) in float32, at most in - 1
__device__ __forceinline__ i64 nearest_src(i64 i, i64 in, i64 out) {
    const float s = __fmul_rn((float)i, __fdiv_rn((float)in, (float)out));
    return min((i64)floorf(s), in - 1);
}
// upscale: src0 (W, H, C, N) -> dst (ne0, ne1, ne2, ne3) of the same type; MODE 0 nearest, 1 bilinear,
// 2 bilinear align-corners (dims 2 and 3 always nearest)
template <typename T, int MODE> __device__ void upscale(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* in = a.src0 + nearest_src(c[2], a.ne0[2], a.ne[2]) * a.nb0[2]
                                + nearest_src(c[3], a.ne0[3], a.ne[3]) * a.nb0[3];
        float v;
        if (MODE == 0) {
            const i64 x = nearest_src(c[0], a.ne0[0], a.ne[0]), y = nearest_src(c[1], a.ne0[1], a.ne[1]);
            v = to_f(*(const T*)(in + x * a.nb0[0] + y * a.nb0[1]));
        } else {
            i64 x0, x1, y0, y1;
            const float wx = linear<MODE == 2>(c[0], a.ne0[0], a.ne[0], x0, x1);
            const float wy = linear<MODE == 2>(c[1], a.ne0[1], a.ne[1], y0, y1);
            #define AT(x, y) to_f(*(const T*)(in + (x) * a.nb0[0] + (y) * a.nb0[1]))
            v = (1.f - wy) * ((1.f - wx) * AT(x0, y0) + wx * AT(x1, y0)) + wy * ((1.f - wx) * AT(x0, y1) + wx * AT(x1, y1));
            #undef AT
        }
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}

extern "C" __global__ void pool_2d_max_f32(const Args a) { grid_dependency(); pool_2d<float, true>(a); }
extern "C" __global__ void pool_2d_avg_f32(const Args a) { grid_dependency(); pool_2d<float, false>(a); }
extern "C" __global__ void upscale_nearest_f32(const Args a) { grid_dependency(); upscale<float, 0>(a); }
extern "C" __global__ void upscale_bilinear_f32(const Args a) { grid_dependency(); upscale<float, 1>(a); }
extern "C" __global__ void upscale_bilinear_ac_f32(const Args a) { grid_dependency(); upscale<float, 2>(a); }
extern "C" __global__ void pool_2d_max_f16(const Args a) { grid_dependency(); pool_2d<half_t, true>(a); }
extern "C" __global__ void pool_2d_avg_f16(const Args a) { grid_dependency(); pool_2d<half_t, false>(a); }
extern "C" __global__ void upscale_nearest_f16(const Args a) { grid_dependency(); upscale<half_t, 0>(a); }
extern "C" __global__ void upscale_bilinear_f16(const Args a) { grid_dependency(); upscale<half_t, 1>(a); }
extern "C" __global__ void upscale_bilinear_ac_f16(const Args a) { grid_dependency(); upscale<half_t, 2>(a); }
extern "C" __global__ void pool_2d_max_bf16(const Args a) { grid_dependency(); pool_2d<bf16_t, true>(a); }
extern "C" __global__ void pool_2d_avg_bf16(const Args a) { grid_dependency(); pool_2d<bf16_t, false>(a); }
extern "C" __global__ void upscale_nearest_bf16(const Args a) { grid_dependency(); upscale<bf16_t, 0>(a); }
extern "C" __global__ void upscale_bilinear_bf16(const Args a) { grid_dependency(); upscale<bf16_t, 1>(a); }
extern "C" __global__ void upscale_bilinear_ac_bf16(const Args a) { grid_dependency(); upscale<bf16_t, 2>(a); }
