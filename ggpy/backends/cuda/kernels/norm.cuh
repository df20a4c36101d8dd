// norm, rms_norm (one block per row), LayerNorm with its affine fused (norm_affine: a block, a warp or a warp with
// vector accesses per row), group_norm (one block per (group, batch)) and add + rms_norm fused (add_rms_norm)
// (kernels/norm.py). Instantiated by norm.cu and norm_affine_<type>.cu.
#pragma once
#include "common.cuh"
#include "ops.cuh"

#define X(i) to_f(*(const T*)(x + (i) * a.nb0[0]))
template <typename T, bool RMS> __device__ void norm_row(const Args& a) {      // p0: eps
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0); char* y = a.dst + byte_offset(c, a.nb);
    const double n = (double)a.ne0[0];
    float mean = 0.f;
    if (!RMS) {
        double s = 0.0;
        ROW_LOOP(i) s += X(i);
        mean = (float)(block_reduce(s, Sum(), 0.0) / n);
    }
    double v = 0.0;
    ROW_LOOP(i) { float d = X(i) - mean; v += (double)d * d; }
    float inv = (float)(1.0 / sqrt(block_reduce(v, Sum(), 0.0) / n + (double)a.p0));
    ROW_LOOP(i) *(T*)(y + i * a.nb[0]) = from_f<T>((X(i) - mean) * inv);
}

// LayerNorm with its affine fused (norm -> mul(weight) -> add(bias) [-> activation iop, see epilogue_act]): src1 the
// weight, src2 the bias (of T, contiguous, ne0[0] each); dst T (the last node's memory) by its nb. Sums in float over the row held in registers
// when it fits (ne0[0] <= 8 * blockDim.x), else re-read.
template <typename T> __device__ void norm_affine_row(const Args& a) {      // p0: eps
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0); char* y = a.dst + byte_offset(c, a.nb);
    const T* w = (const T*)a.src1; const T* b = (const T*)a.src2;
    const int n = (int)a.ne0[0];
    float v[8];
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < n ? X(i) : 0.f;
        s += v[j];
    }
    for (int i = threadIdx.x + 8 * blockDim.x; i < n; i += blockDim.x) s += X(i);
    const float mean = block_reduce(s, Sum(), 0.f) / n;
    float q = 0.f;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n) { const float d = v[j] - mean; q += d * d; }
    }
    for (int i = threadIdx.x + 8 * blockDim.x; i < n; i += blockDim.x) { const float d = X(i) - mean; q += d * d; }
    const float inv = rsqrtf(block_reduce(q, Sum(), 0.f) / n + a.p0);
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < n) *(T*)(y + i * a.nb[0]) = from_f<T>(epilogue_act(a.iop, (v[j] - mean) * inv * to_f(w[i]) + to_f(b[i])));
    }
    for (int i = threadIdx.x + 8 * blockDim.x; i < n; i += blockDim.x)
        *(T*)(y + i * a.nb[0]) = from_f<T>(epilogue_act(a.iop, (X(i) - mean) * inv * to_f(w[i]) + to_f(b[i])));
}

// norm_affine_row for rows of at most 32 * NORM_WARP_V elements: one warp per row, the row in registers, warp
// shuffles for the sums (no shared memory, no block barrier); blockDim.x / 32 rows per block
#define NORM_WARP_V 16
template <typename T> __device__ void norm_affine_warp(const Args& a) {      // p0: eps
    int c[3];
    if (!warp_row(a, c)) return;                  // the whole warp leaves together
    const int lane = threadIdx.x & 31, c1 = c[0], c2 = c[1], c3 = c[2];
    const char* x = a.src0 + c1 * a.nb0[1] + c2 * a.nb0[2] + c3 * a.nb0[3];
    char* y = a.dst + c1 * a.nb[1] + c2 * a.nb[2] + c3 * a.nb[3];
    const T* w = (const T*)a.src1; const T* b = (const T*)a.src2;
    const int n = (int)a.ne0[0], xs = (int)a.nb0[0], ys = (int)a.nb[0];
    float v[NORM_WARP_V];
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < NORM_WARP_V; ++j) {
        const int i = lane + 32 * j;
        v[j] = i < n ? to_f(*(const T*)(x + i * xs)) : 0.f;
        s += v[j];
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / n;
    float q = 0.f;
    #pragma unroll
    for (int j = 0; j < NORM_WARP_V; ++j)
        if (lane + 32 * j < n) { const float d = v[j] - mean; q += d * d; }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float inv = rsqrtf(q / n + a.p0);
    #pragma unroll
    for (int j = 0; j < NORM_WARP_V; ++j) {
        const int i = lane + 32 * j;
        if (i < n) *(T*)(y + i * ys) = from_f<T>(epilogue_act(a.iop, (v[j] - mean) * inv * to_f(w[i]) + to_f(b[i])));
    }
}

// norm_affine_warp with 4-element vector accesses: rows contiguous with ne0[0] % 4 == 0 and 4-element aligned
// (norm_affine_steps checks), at most 128 * NORM_VEC_STEPS long; lane l holds elements 4 (l + 32 j) .. + 3
#define NORM_VEC_STEPS 4
template <typename T> __device__ void norm_affine_vec(const Args& a) {      // p0: eps
    int c[3];
    if (!warp_row(a, c)) return;
    const int lane = threadIdx.x & 31, n = (int)a.ne0[0], n4 = n / 4;
    const char* x = a.src0 + c[0] * a.nb0[1] + c[1] * a.nb0[2] + c[2] * a.nb0[3];
    char* y = a.dst + c[0] * a.nb[1] + c[1] * a.nb[2] + c[2] * a.nb[3];
    float4 v[NORM_VEC_STEPS];
    float s = 0.f;
    #pragma unroll
    for (int j = 0; j < NORM_VEC_STEPS; ++j) {
        const int i = lane + 32 * j;
        v[j] = i < n4 ? load4<T>(x + i * 4 * (int)sizeof(T)) : make_float4(0.f, 0.f, 0.f, 0.f);
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / n;
    float q = 0.f;
    #pragma unroll
    for (int j = 0; j < NORM_VEC_STEPS; ++j) {
        if (lane + 32 * j < n4) {
            const float4 d = make_float4(v[j].x - mean, v[j].y - mean, v[j].z - mean, v[j].w - mean);
            q += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
        }
    }
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float inv = rsqrtf(q / n + a.p0);
    #pragma unroll
    for (int j = 0; j < NORM_VEC_STEPS; ++j) {
        const int i = lane + 32 * j;
        if (i < n4) {
            const float4 w = load4<T>(a.src1 + i * 4 * (int)sizeof(T)), b = load4<T>(a.src2 + i * 4 * (int)sizeof(T));
            store4<T>(y + i * 4 * (int)sizeof(T), make_float4(epilogue_act(a.iop, (v[j].x - mean) * inv * w.x + b.x),
                                                              epilogue_act(a.iop, (v[j].y - mean) * inv * w.y + b.y),
                                                              epilogue_act(a.iop, (v[j].z - mean) * inv * w.z + b.z),
                                                              epilogue_act(a.iop, (v[j].w - mean) * inv * w.w + b.w)));
        }
    }
}

// block (g, n): channels [g * per, min(C, (g + 1) * per)) of batch n normalised over (W, H, channels); p0: per, p1: eps
template <typename T> __device__ void group_norm_k(const Args& a) {
    const i64 per = (i64)a.p0, g = blockIdx.x, n = blockIdx.y;
    const i64 c0 = g * per, c1 = min(a.ne0[2], c0 + per);
    if (c0 >= c1) return;
    const i64 plane = a.ne0[0] * a.ne0[1], count = plane * (c1 - c0);
#define GN_COORDS(e) i64 c[4] = {(e) % a.ne0[0], ((e) / a.ne0[0]) % a.ne0[1], c0 + (e) / plane, n}
#define GN_X(e) to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)))
    double s = 0.0;
    for (i64 e = threadIdx.x; e < count; e += blockDim.x) { GN_COORDS(e); s += GN_X(e); }
    const float mean = (float)(block_reduce(s, Sum(), 0.0) / (double)count);
    double v = 0.0;
    for (i64 e = threadIdx.x; e < count; e += blockDim.x) { GN_COORDS(e); float d = GN_X(e) - mean; v += (double)d * d; }
    const float inv = (float)(1.0 / sqrt(block_reduce(v, Sum(), 0.0) / (double)count + (double)a.p1));
    for (i64 e = threadIdx.x; e < count; e += blockDim.x) {
        GN_COORDS(e);
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>((GN_X(e) - mean) * inv);
    }
#undef GN_COORDS
#undef GN_X
}
#undef X

// add + rms_norm as one row kernel (the fusion pass's add_rms_norm, kernels/norm.py): s = src0 + src1 (F32, one shape)
// written to src2 by dst's strides (the add's memory, still read by others: the residual stream), then dst = s /
// sqrt(mean(s^2) + eps) as norm_row<float, true> computes it [times w (F32, ne0[0] contiguous): the norm's weight],
// one block per row; each element of a row is read before the row is written (dst and src2 may lie exactly over src0
// or src1, dst over src2). p0: eps
template <bool SCALE> __device__ void add_rms_norm_row(const Args& a, const float* w) {
    i64 c[4]; row_coords(a, c);
    const char* x0 = a.src0 + byte_offset(c, a.nb0); const char* x1 = a.src1 + byte_offset(c, a.nb1);
    char* s = (char*)a.src2 + byte_offset(c, a.nb); char* y = a.dst + byte_offset(c, a.nb);
    double v = 0.0;
    ROW_LOOP(i) {
        const float t = *(const float*)(x0 + i * a.nb0[0]) + *(const float*)(x1 + i * a.nb1[0]);
        *(float*)(s + i * a.nb[0]) = t;
        v += (double)t * t;
    }
    const float inv = (float)(1.0 / sqrt(block_reduce(v, Sum(), 0.0) / (double)a.ne0[0] + (double)a.p0));
    ROW_LOOP(i) {
        const float r = *(const float*)(s + i * a.nb[0]) * inv;
        *(float*)(y + i * a.nb[0]) = SCALE ? r * w[i] : r;
    }
}
// an Args and the address of a weight row (the fused scale of add_rms_norm_mul_f32, rms_norm_mul_f32)
struct WeightArgs { Args a; const char* w; };

// rms_norm -> mul(w) as one row kernel (the rms_norm_mul pattern): dst (the mul's memory, by its strides; may lie
// exactly over src0) = src0 / sqrt(mean(src0^2) + eps) * w (T, ne0[0] contiguous), one block per row, each element
// read before it is written; p0: eps
template <typename T> __device__ void rms_norm_mul_row(const Args& a, const T* w) {
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0); char* y = a.dst + byte_offset(c, a.nb);
    double v = 0.0;
    ROW_LOOP(i) { const float t = to_f(*(const T*)(x + i * a.nb0[0])); v += (double)t * t; }
    const float inv = (float)(1.0 / sqrt(block_reduce(v, Sum(), 0.0) / (double)a.ne0[0] + (double)a.p0));
    ROW_LOOP(i) *(T*)(y + i * a.nb[0]) = from_f<T>(to_f(*(const T*)(x + i * a.nb0[0])) * inv * to_f(w[i]));
}
