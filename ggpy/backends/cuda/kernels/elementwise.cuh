// The elementwise family's kernels (kernels/elementwise.py) on ops.cuh's functors, math in float: binary (add, sub,
// mul, div) with ggml broadcasting (b repeats over a) and unary (the unary functions, sin, cos, scale, clamp,
// leaky_relu; p0, p1 their parameters); dst has a's ne, every source any strides. Instantiated by elementwise*.cu.
//
// Fast paths (`_c_` kernels), for contiguous tensors under 2^31 elements: flat 32-bit indices; for binary ops b's
// dims are one block of a's, b's index (i / inner) % b's elements with inner = a.iop (a row vector over ne[0] has
// inner 1, a per-channel vector over ne[2] ne[0] * ne[1]); unary ones with a.iop 4 (F32) or 8 (F16 / BF16), n a
// multiple of it and 16-byte aligned, move 16 bytes per access. The others unravel in 32 bits where the tensors
// fit (a.iop, DISPATCH_I).
#pragma once
#include "common.cuh"
#include "ops.cuh"

template <typename Op, typename TA, typename TB, typename I> __device__ void binary_i(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4], cb[4];
        unravel(i, a.ne, c);
        for (int k = 0; k < 4; ++k) cb[k] = c[k] % (I)a.ne1[k];
        float x = to_f(*(const TA*)(a.src0 + byte_offset(c, a.nb0)));
        float y = to_f(*(const TB*)(a.src1 + byte_offset(cb, a.nb1)));
        *(TA*)(a.dst + byte_offset(c, a.nb)) = from_f<TA>(Op::f(x, y));
    }
}
template <typename Op, typename TA, typename TB> __device__ void binary(const Args& a) { DISPATCH_I(a, binary_i, Op, TA, TB); }

template <typename Op, typename TA, typename TB> __device__ void binary_c(const Args& a) {
    const unsigned n = (unsigned)a.n, n1 = (unsigned)(a.ne1[0] * a.ne1[1] * a.ne1[2] * a.ne1[3]);
    const unsigned inner = (unsigned)a.iop;
    const TA* x0 = (const TA*)a.src0; const TB* y0 = (const TB*)a.src1; TA* d = (TA*)a.dst;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float x = to_f(x0[i]);
        float y = to_f(y0[n1 == n ? i : (inner > 1 ? i / inner : i) % n1]);
        d[i] = from_f<TA>(Op::f(x, y));
    }
}

template <typename Op, typename T, typename I> __device__ void unary_i(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        float x = to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(Op::f(x, a.p0, a.p1));
    }
}
template <typename Op, typename T> __device__ void unary(const Args& a) { DISPATCH_I(a, unary_i, Op, T); }

template <typename Op, typename T> __device__ void unary_c(const Args& a) {
    const unsigned n = (unsigned)a.n;
    const T* x0 = (const T*)a.src0; T* d = (T*)a.dst;
    if (sizeof(T) == 2 && a.iop == 8) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 8; i += gridDim.x * blockDim.x) {
            uint4 v = ((const uint4*)x0)[i];
            T* e = (T*)&v;
            #pragma unroll
            for (int j = 0; j < 8; ++j) e[j] = from_f<T>(Op::f(to_f(e[j]), a.p0, a.p1));
            ((uint4*)d)[i] = v;
        }
        return;
    }
    if (sizeof(T) == 4 && a.iop == 4) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += gridDim.x * blockDim.x) {
            float4 v = ((const float4*)x0)[i];
            v.x = Op::f(v.x, a.p0, a.p1);
            v.y = Op::f(v.y, a.p0, a.p1);
            v.z = Op::f(v.z, a.p0, a.p1);
            v.w = Op::f(v.w, a.p0, a.p1);
            ((float4*)d)[i] = v;
        }
        return;
    }
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        d[i] = from_f<T>(Op::f(to_f(x0[i]), a.p0, a.p1));
}
