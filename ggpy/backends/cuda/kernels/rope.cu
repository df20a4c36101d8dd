// rope (ggml_rope_ext): one thread per pair of a row, normal or NEOX pairs, the angle in double (kernels/rope.py).
#include "common.cuh"

// a.src1: I32 positions (ne1[0] of them), a.src2: F32 frequency factors or null; p0: freq_base, p1: freq_scale;
// iop: NEOX pairs; ip: n_dims, then the float bits of ext_factor, mscale and YaRN's corr dims low, high
template <typename T> __device__ void rope_k(const Args& a) {
    const int n_dims = a.ip[0], half = n_dims / 2;
    const float ext = __int_as_float(a.ip[1]), mscale = __int_as_float(a.ip[2]);
    const float low = __int_as_float(a.ip[3]), high = __int_as_float(a.ip[4]);
    const i64 units = (a.ne[0] + 1) / 2, n = units * a.ne[1] * a.ne[2] * a.ne[3];
    for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (i64)gridDim.x * blockDim.x) {
        const i64 j = u % units;
        i64 r = u / units, c[4];
        c[0] = 0; c[1] = r % a.ne[1]; r /= a.ne[1]; c[2] = r % a.ne[2]; c[3] = r / a.ne[2];
        const char* x = a.src0 + byte_offset(c, a.nb0);
        char* y = a.dst + byte_offset(c, a.nb);
        if (j >= half) {
            for (i64 k = 2 * j; k < 2 * j + 2 && k < a.ne[0]; ++k) *(T*)(y + k * a.nb[0]) = *(const T*)(x + k * a.nb0[0]);
            continue;
        }
        double extrap = (double)*(const int*)(a.src1 + c[2] * a.nb1[0]) * pow((double)a.p0, -2.0 * j / n_dims);
        if (a.src2) extrap /= ((const float*)a.src2)[j];
        double theta = extrap * a.p1;
        if (ext != 0.f) {
            const double mix = ext * (1.0 - fmin(1.0, fmax(0.0, (j - low) / fmax(0.001, (double)high - low))));
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        double s, co;
        sincos(theta, &s, &co);
        const float cs = (float)co * mscale, sn = (float)s * mscale;
        const i64 k0 = a.iop ? j : 2 * j, k1 = a.iop ? j + half : 2 * j + 1;
        const float x0 = to_f(*(const T*)(x + k0 * a.nb0[0])), x1 = to_f(*(const T*)(x + k1 * a.nb0[0]));
        *(T*)(y + k0 * a.nb[0]) = from_f<T>(x0 * cs - x1 * sn);
        *(T*)(y + k1 * a.nb[0]) = from_f<T>(x0 * sn + x1 * cs);
    }
}

extern "C" __global__ void rope_f32(const Args a) { rope_k<float>(a); }
extern "C" __global__ void rope_f16(const Args a) { rope_k<half_t>(a); }
extern "C" __global__ void rope_bf16(const Args a) { rope_k<bf16_t>(a); }
