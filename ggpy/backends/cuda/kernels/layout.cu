// Copies and layout: copy (dup, cont, cast, cpy between float types, I32 as is), concat, pad, repeat, get_rows
// (one thread per dst element) and set_rows (one thread per element of b) (kernels/layout.py).
#include "common.cuh"

// a.ip[0] (layout.py's dense_copy): both contiguous and 16-byte aligned, a multiple of 8 elements: 8 a thread
template <typename S, typename D> __device__ void copy_dense(const Args& a) {
    for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < a.n >> 3; c += (i64)gridDim.x * blockDim.x) {
        __align__(16) S s[8];
        __align__(16) D d[8];
        load8(a.src0 + (c << 3) * (i64)sizeof(S), s);
        #pragma unroll
        for (int j = 0; j < 8; ++j) d[j] = convert<D, S>(s[j]);
        store8(a.dst + (c << 3) * (i64)sizeof(D), d);
    }
}
template <typename S, typename D, typename I> __device__ void copy_i(const Args& a) {
    if (a.ip[0]) {
        copy_dense<S, D>(a);
        return;
    }
    FOR_EACH_ELEMENT_I(a, i, I) {
        I cs[4], cd[4];
        unravel(i, a.ne0, cs);
        unravel(i, a.ne, cd);
        *(D*)(a.dst + byte_offset(cd, a.nb)) = convert<D, S>(*(const S*)(a.src0 + byte_offset(cs, a.nb0)));
    }
}
template <typename S, typename D> __device__ void copy(const Args& a) { DISPATCH_I(a, copy_i, S, D); }

template <typename T> __device__ void concat_k(const Args& a) {          // p0: dim
    const int dim = (int)a.p0;
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        T* d = (T*)(a.dst + byte_offset(c, a.nb));
        if (c[dim] < a.ne0[dim]) { *d = *(const T*)(a.src0 + byte_offset(c, a.nb0)); continue; }
        c[dim] -= a.ne0[dim];
        *d = *(const T*)(a.src1 + byte_offset(c, a.nb1));
    }
}
template <typename T> __device__ void pad_k(const Args& a) {              // p0, p1: lp0 | lp1 << 12, lp2 | lp3 << 12
    const int p = (int)a.p0, q = (int)a.p1;
    const i64 lp[4] = {p & 4095, p >> 12, q & 4095, q >> 12};
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4], s[4]; unravel(i, a.ne, c);
        bool in = true;
        for (int k = 0; k < 4; ++k) { s[k] = c[k] - lp[k]; in = in && s[k] >= 0 && s[k] < a.ne0[k]; }
        *(T*)(a.dst + byte_offset(c, a.nb)) = in ? *(const T*)(a.src0 + byte_offset(s, a.nb0)) : from_f<T>(0.f);
    }
}
template <typename T> __device__ void repeat_k(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4], s[4]; unravel(i, a.ne, c);
        for (int k = 0; k < 4; ++k) s[k] = c[k] % a.ne0[k];
        *(T*)(a.dst + byte_offset(c, a.nb)) = *(const T*)(a.src0 + byte_offset(s, a.nb0));
    }
}
template <typename S, typename D> __device__ void get_rows_k(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        i64 s[4] = {c[0], *(const int*)(a.src1 + c[1] * a.nb1[0] + c[2] * a.nb1[1] + c[3] * a.nb1[2]), c[2], c[3]};
        *(D*)(a.dst + byte_offset(c, a.nb)) = convert<D, S>(*(const S*)(a.src0 + byte_offset(s, a.nb0)));
    }
}
// set_rows: src0 b (K, n, A2, A3), src1 c I32 (n, C1, C2), dst a (K, R, A2, A3):
// a[i3, i2, c[i3 % C2, i2 % C1, i1]] = b[i3, i2, i1]; a thread per element of b
template <typename S, typename D> __device__ void set_rows_k(const Args& a) {
    const i64 n = a.ne0[0] * a.ne0[1] * a.ne0[2] * a.ne0[3];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 c[4]; unravel(i, a.ne0, c);
        const i64 j = *(const int*)(a.src1 + c[1] * a.nb1[0] + (c[2] % a.ne1[1]) * a.nb1[1] + (c[3] % a.ne1[2]) * a.nb1[2]);
        if (j < 0 || j >= a.ne[1]) continue;
        const i64 d[4] = {c[0], j, c[2], c[3]};
        *(D*)(a.dst + byte_offset(d, a.nb)) = convert<D, S>(*(const S*)(a.src0 + byte_offset(c, a.nb0)));
    }
}

// set_rows into Q8_0 rows (ggml's quantize_row_q8_0: d = max |x| / 127, q = round(x / d)): a warp per 32-block of
// b (lane j its element j), written into block i0 / 32 of row c[...] of a
template <typename S> __device__ void set_rows_q8_0_k(const Args& a) {
    const i64 blocks = a.ne0[0] >> 5, n = blocks * a.ne0[1] * a.ne0[2] * a.ne0[3];
    const int j = threadIdx.x & 31;
    const i64 step = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < n; w += step) {
        const i64 blk = w % blocks, r = w / blocks;
        const i64 i1 = r % a.ne0[1], i2 = r / a.ne0[1] % a.ne0[2], i3 = r / a.ne0[1] / a.ne0[2];
        const i64 row = *(const int*)(a.src1 + i1 * a.nb1[0] + (i2 % a.ne1[1]) * a.nb1[1] + (i3 % a.ne1[2]) * a.nb1[2]);
        if (row < 0 || row >= a.ne[1]) continue;                  // the same for the whole warp
        const float x = to_f(*(const S*)(a.src0 + (blk * 32 + j) * a.nb0[0] + i1 * a.nb0[1] + i2 * a.nb0[2] + i3 * a.nb0[3]));
        float amax = fabsf(x);
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = __fdiv_rn(amax, 127.f), inv = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
        unsigned char* b = (unsigned char*)a.dst + row * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3] + blk * 34;
        if (j == 0) *(half_t*)b = from_f<half_t>(d);
        b[2 + j] = (unsigned char)(signed char)(int)roundf(__fmul_rn(x, inv));
    }
}

extern "C" __global__ void copy_f32_f32(const Args a) { grid_dependency(); copy<float, float>(a); }
extern "C" __global__ void copy_f32_f16(const Args a) { grid_dependency(); copy<float, half_t>(a); }
extern "C" __global__ void copy_f32_bf16(const Args a) { grid_dependency(); copy<float, bf16_t>(a); }
extern "C" __global__ void copy_f16_f32(const Args a) { grid_dependency(); copy<half_t, float>(a); }
extern "C" __global__ void copy_f16_f16(const Args a) { grid_dependency(); copy<half_t, half_t>(a); }
extern "C" __global__ void copy_f16_bf16(const Args a) { grid_dependency(); copy<half_t, bf16_t>(a); }
extern "C" __global__ void copy_bf16_f32(const Args a) { grid_dependency(); copy<bf16_t, float>(a); }
extern "C" __global__ void copy_bf16_f16(const Args a) { grid_dependency(); copy<bf16_t, half_t>(a); }
extern "C" __global__ void copy_bf16_bf16(const Args a) { grid_dependency(); copy<bf16_t, bf16_t>(a); }
extern "C" __global__ void copy_i32_i32(const Args a) { grid_dependency(); copy<int, int>(a); }
extern "C" __global__ void concat_f32(const Args a) { grid_dependency(); concat_k<float>(a); }
extern "C" __global__ void repeat_f32(const Args a) { grid_dependency(); repeat_k<float>(a); }
extern "C" __global__ void get_rows_f32(const Args a) { grid_dependency(); get_rows_k<float, float>(a); }
extern "C" __global__ void pad_f32(const Args a) { grid_dependency(); pad_k<float>(a); }
extern "C" __global__ void concat_f16(const Args a) { grid_dependency(); concat_k<half_t>(a); }
extern "C" __global__ void repeat_f16(const Args a) { grid_dependency(); repeat_k<half_t>(a); }
extern "C" __global__ void get_rows_f16(const Args a) { grid_dependency(); get_rows_k<half_t, float>(a); }
extern "C" __global__ void pad_f16(const Args a) { grid_dependency(); pad_k<half_t>(a); }
extern "C" __global__ void concat_bf16(const Args a) { grid_dependency(); concat_k<bf16_t>(a); }
extern "C" __global__ void repeat_bf16(const Args a) { grid_dependency(); repeat_k<bf16_t>(a); }
extern "C" __global__ void get_rows_bf16(const Args a) { grid_dependency(); get_rows_k<bf16_t, float>(a); }
extern "C" __global__ void pad_bf16(const Args a) { grid_dependency(); pad_k<bf16_t>(a); }
extern "C" __global__ void concat_i32(const Args a) { grid_dependency(); concat_k<int>(a); }
extern "C" __global__ void repeat_i32(const Args a) { grid_dependency(); repeat_k<int>(a); }
extern "C" __global__ void get_rows_i32(const Args a) { grid_dependency(); get_rows_k<int, int>(a); }
extern "C" __global__ void set_rows_f32_f32(const Args a) { grid_dependency(); set_rows_k<float, float>(a); }
extern "C" __global__ void set_rows_f32_f16(const Args a) { grid_dependency(); set_rows_k<float, half_t>(a); }
extern "C" __global__ void set_rows_f32_bf16(const Args a) { grid_dependency(); set_rows_k<float, bf16_t>(a); }
extern "C" __global__ void set_rows_f16_f32(const Args a) { grid_dependency(); set_rows_k<half_t, float>(a); }
extern "C" __global__ void set_rows_f16_f16(const Args a) { grid_dependency(); set_rows_k<half_t, half_t>(a); }
extern "C" __global__ void set_rows_f16_bf16(const Args a) { grid_dependency(); set_rows_k<half_t, bf16_t>(a); }
extern "C" __global__ void set_rows_bf16_f32(const Args a) { grid_dependency(); set_rows_k<bf16_t, float>(a); }
extern "C" __global__ void set_rows_bf16_f16(const Args a) { grid_dependency(); set_rows_k<bf16_t, half_t>(a); }
extern "C" __global__ void set_rows_bf16_bf16(const Args a) { grid_dependency(); set_rows_k<bf16_t, bf16_t>(a); }
extern "C" __global__ void set_rows_f32_q8_0(const Args a) { grid_dependency(); set_rows_q8_0_k<float>(a); }
extern "C" __global__ void set_rows_f16_q8_0(const Args a) { grid_dependency(); set_rows_q8_0_k<half_t>(a); }
extern "C" __global__ void set_rows_bf16_q8_0(const Args a) { grid_dependency(); set_rows_q8_0_k<bf16_t>(a); }
