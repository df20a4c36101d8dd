// soft_max (mask F32/F16 broadcast over dims 2 and 3, scale, ALiBi slopes; one block per row, short rows one warp
// per row) and diag_mask_inf (grid-stride); F32, F16 and BF16, sources with any strides (kernels/softmax.py).
// Instantiated by softmax_<type>.cu.
#pragma once
#include "common.cuh"

#define X(i) to_f(*(const T*)(x + (i) * a.nb0[0]))
// softmax(x * p0 + slope * mask); slope = 1, or with max_bias p1 > 0 ggml's ALiBi slope of head i2
template <typename T, typename M> __device__ void soft_max_row(const Args& a) {
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0); char* y = a.dst + byte_offset(c, a.nb);
    const char* m = 0;
    if (a.src1) { i64 cm[4] = {0, c[1], c[2] % a.ne1[2], c[3] % a.ne1[3]}; m = a.src1 + byte_offset(cm, a.nb1); }
    float slope = 1.f;
    if (a.p1 > 0.f) {
        int h = (int)c[2], n_log2 = 1 << (int)floorf(log2f((float)a.ne0[2]));
        float m0 = exp2f(-a.p1 / n_log2), m1 = exp2f(-(a.p1 / 2.f) / n_log2);
        slope = h < n_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_log2) + 1));
    }
#define V(i) (X(i) * a.p0 + (m ? slope * to_f(*(const M*)(m + (i) * a.nb1[0])) : 0.f))
    float mx = NEG_INF;
    ROW_LOOP(i) mx = fmaxf(mx, V(i));
    mx = block_reduce(mx, Max(), NEG_INF);
    float s = 0.f;
    ROW_LOOP(i) s += expf(V(i) - mx);
    float inv = 1.f / block_reduce(s, Sum(), 0.f);
    ROW_LOOP(i) *(T*)(y + i * a.nb[0]) = from_f<T>(expf(V(i) - mx) * inv);
#undef V
}

// soft_max of short rows (ne0[0] <= 32 * SOFT_MAX_WARP_V): one warp per row, the row in registers, warp
// shuffles for the max and the sum (no shared memory, no block barrier); blockDim.x / 32 rows per block
#define SOFT_MAX_WARP_V 8
template <typename T, typename M> __device__ void soft_max_warp(const Args& a) {
    int c[3];
    if (!warp_row(a, c)) return;                  // the whole warp leaves together
    const int lane = threadIdx.x & 31, c1 = c[0], c2 = c[1], c3 = c[2];
    const char* x = a.src0 + c1 * a.nb0[1] + c2 * a.nb0[2] + c3 * a.nb0[3];
    char* y = a.dst + c1 * a.nb[1] + c2 * a.nb[2] + c3 * a.nb[3];
    const char* m = 0;
    if (a.src1) m = a.src1 + c1 * a.nb1[1] + (c2 % (int)a.ne1[2]) * a.nb1[2] + (c3 % (int)a.ne1[3]) * a.nb1[3];
    float slope = 1.f;
    if (a.p1 > 0.f) {
        int h = c2, n_log2 = 1 << (int)floorf(log2f((float)a.ne0[2]));
        float m0 = exp2f(-a.p1 / n_log2), m1 = exp2f(-(a.p1 / 2.f) / n_log2);
        slope = h < n_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_log2) + 1));
    }
    const int n = (int)a.ne0[0], xs = (int)a.nb0[0], ys = (int)a.nb[0], ms = (int)a.nb1[0];
    float v[SOFT_MAX_WARP_V];
    float mx = NEG_INF;
    #pragma unroll
    for (int j = 0; j < SOFT_MAX_WARP_V; ++j) {
        const int i = lane + 32 * j;
        v[j] = NEG_INF;
        if (i < n) {
            v[j] = to_f(*(const T*)(x + i * xs)) * a.p0 + (m ? slope * to_f(*(const M*)(m + i * ms)) : 0.f);
            mx = fmaxf(mx, v[j]);
        }
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < SOFT_MAX_WARP_V; ++j)
        if (lane + 32 * j < n) { v[j] = expf(v[j] - mx); s += v[j]; }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.f / s;
    #pragma unroll
    for (int j = 0; j < SOFT_MAX_WARP_V; ++j) {
        const int i = lane + 32 * j;
        if (i < n) *(T*)(y + i * ys) = from_f<T>(v[j] * inv);
    }
}

// a[..., i1, i0] = -inf where i0 > n_past + i1; p0: n_past
template <typename T> __device__ void diag_mask_inf_k(const Args& a) {
    const i64 n_past = (i64)a.p0;
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        float v = c[0] > n_past + c[1] ? __int_as_float(0xff800000) : to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
#undef X
