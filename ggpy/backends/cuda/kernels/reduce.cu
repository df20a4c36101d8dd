// sum_rows, mean (one block per row) and sum (one block); float sources with any strides, sums in double
// (kernels/reduce.py).
#include "common.cuh"

#define X(i) to_f(*(const T*)(x + (i) * a.nb0[0]))
template <typename T, bool MEAN> __device__ void sum_row(const Args& a) {
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0);
    double s = 0.0;
    ROW_LOOP(i) s += X(i);
    s = block_reduce(s, Sum(), 0.0);
    if (threadIdx.x == 0) *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>((float)(MEAN ? s / a.ne0[0] : s));
}

template <typename T> __device__ void sum_all(const Args& a) {            // one block
    double s = 0.0;
    i64 n = a.ne0[0] * a.ne0[1] * a.ne0[2] * a.ne0[3];
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        i64 c[4]; unravel(i, a.ne0, c);
        s += to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
    }
    s = block_reduce(s, Sum(), 0.0);
    if (threadIdx.x == 0) *(T*)a.dst = from_f<T>((float)s);
}

#undef X

extern "C" __global__ void sum_rows_f32(const Args a) { grid_dependency(); sum_row<float, false>(a); }
extern "C" __global__ void mean_f32(const Args a) { grid_dependency(); sum_row<float, true>(a); }
extern "C" __global__ void sum_f32(const Args a) { grid_dependency(); sum_all<float>(a); }
extern "C" __global__ void sum_rows_f16(const Args a) { grid_dependency(); sum_row<half_t, false>(a); }
extern "C" __global__ void mean_f16(const Args a) { grid_dependency(); sum_row<half_t, true>(a); }
extern "C" __global__ void sum_f16(const Args a) { grid_dependency(); sum_all<half_t>(a); }
extern "C" __global__ void sum_rows_bf16(const Args a) { grid_dependency(); sum_row<bf16_t, false>(a); }
extern "C" __global__ void mean_bf16(const Args a) { grid_dependency(); sum_row<bf16_t, true>(a); }
extern "C" __global__ void sum_bf16(const Args a) { grid_dependency(); sum_all<bf16_t>(a); }
