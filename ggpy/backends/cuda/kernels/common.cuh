// What every kernel shares: the launch-argument struct (twin of kernels/common.py's ctypes Args), F16 and BF16
// conversion, vector loads, indexing, block reductions, the row helpers of row-wise kernels and the grid-stride
// loops. Included by every .cu file (NVRTC's include path is this folder).
//
// A kernel takes one `Args` by value: the dst pointer and up to two sources, each with ne and nb (bytes) in ggml
// order, and two float parameters. By default every thread handles elements of dst at a flat index in ne order
// (grid-stride); a family may choose its own grid and block per node (launch_config in Python).
#pragma once

typedef unsigned short half_t;                   // F16 bits; converted with the PTX cvt instructions
typedef long long i64;

struct Args {
    char* dst; const char* src0; const char* src1;
    i64 n;                                        // elements of dst
    i64 ne[4]; i64 nb[4];                         // dst
    i64 ne0[4]; i64 nb0[4];                       // src0
    i64 ne1[4]; i64 nb1[4];                       // src1
    float p0, p1;                                 // op parameters
    const char* src2;                             // a third operand (fused epilogues: a bias vector)
    int iop;                                      // an integer parameter (fused epilogues: the activation)
    int ip[6];                                    // integer op parameters (conv: s0 s1 d0 p0 p1 d1; pool: k s p)
};

// Programmatic dependent launch (sm_90 on, launch.py's attribute): every kernel entry starts here. A kernel launched
// while the one before it still runs waits for that one to end (its writes visible), then lets the next kernel launch,
// so a launch's latency overlaps the kernel before it. A no-op for a kernel launched without the attribute.
__device__ __forceinline__ void grid_dependency() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// one 32-block of a mat-vec's activations as ggml's q8_1 (quant_mmvq.cuh, the q8 hand-off of attention_flash.cuh): lane j holds element x_j; q_j = round(x_j / d) to qs[j], (d, d * sum q) to *ds
__device__ __forceinline__ void quantize_32(float x, int lane, signed char* qs, float2* ds) {
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.f;
    const int q = amax == 0.f ? 0 : (int)rintf(x / d);
    int s = q;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    qs[lane] = (signed char)q;
    if (lane == 0) *ds = make_float2(d, d * (float)s);
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(half_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ half_t from_f<half_t>(float x) {
    half_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;
}
struct bf16_t { unsigned short x; };             // BF16 bits: the upper half of a float32
__device__ __forceinline__ float to_f(bf16_t b) { return __uint_as_float((unsigned)b.x << 16); }
template <> __device__ __forceinline__ bf16_t from_f<bf16_t>(float v) {   // round to nearest even, nan kept
    bf16_t b;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.x) : "f"(v));       // one instruction from sm_80 on
#else
    const unsigned u = __float_as_uint(v);
    b.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u)
                                          : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    return b;
}
template <typename D, typename S> __device__ __forceinline__ D convert(S x) { return from_f<D>(to_f(x)); }
template <> __device__ __forceinline__ int convert<int, int>(int x) { return x; }
// four consecutive elements of T at p as float4 (half types: one 8-byte access; float: 16 bytes)
template <typename T> __device__ __forceinline__ float4 load4(const char* p) {     // 2-byte T: one 8-byte load
    const uint2 u = *(const uint2*)p;
    const T* x = (const T*)&u;
    return make_float4(to_f(x[0]), to_f(x[1]), to_f(x[2]), to_f(x[3]));
}
template <> __device__ __forceinline__ float4 load4<float>(const char* p) { return *(const float4*)p; }
template <typename T> __device__ __forceinline__ void store4(char* p, float4 v) {
    uint2 u;
    T* x = (T*)&u;
    x[0] = from_f<T>(v.x); x[1] = from_f<T>(v.y); x[2] = from_f<T>(v.z); x[3] = from_f<T>(v.w);
    *(uint2*)p = u;
}
template <> __device__ __forceinline__ void store4<float>(char* p, float4 v) { *(float4*)p = v; }

// the coordinates (i0..i3) of flat index i in ne order
__device__ __forceinline__ void unravel(i64 i, const i64* ne, i64* c) {
    c[0] = i % ne[0]; i /= ne[0];
    c[1] = i % ne[1]; i /= ne[1];
    c[2] = i % ne[2]; c[3] = i / ne[2];
}
// 8 elements of T at p (16-byte aligned) to v, or v to p: sizeof(T) / 2 16-byte accesses (v __align__(16))
template <typename T> __device__ __forceinline__ void load8(const char* p, T* v) {
    #pragma unroll
    for (int i = 0; i < (int)sizeof(T) / 2; ++i) ((uint4*)v)[i] = ((const uint4*)p)[i];
}
template <typename T> __device__ __forceinline__ void store8(char* p, const T* v) {
    #pragma unroll
    for (int i = 0; i < (int)sizeof(T) / 2; ++i) ((uint4*)p)[i] = ((const uint4*)v)[i];
}
__device__ __forceinline__ i64 byte_offset(const i64* c, const i64* nb) {
    return c[0] * nb[0] + c[1] * nb[1] + c[2] * nb[2] + c[3] * nb[3];
}
// 32-bit twins of unravel and byte_offset, for tensors whose elements and byte extents fit in 31 bits (fits32);
// kernels that take either pick by a.iop (iparam32 in Python): integer division is much cheaper in 32 bits
__device__ __forceinline__ void unravel(unsigned i, const i64* ne, unsigned* c) {
    const unsigned n0 = (unsigned)ne[0], n1 = (unsigned)ne[1], n2 = (unsigned)ne[2];
    c[0] = i % n0; i /= n0;
    c[1] = i % n1; i /= n1;
    c[2] = i % n2; c[3] = i / n2;
}
__device__ __forceinline__ int byte_offset(const unsigned* c, const i64* nb) {
    return (int)(c[0] * (unsigned)nb[0] + c[1] * (unsigned)nb[1] + c[2] * (unsigned)nb[2] + c[3] * (unsigned)nb[3]);
}
// op (Sum, Max) of v over the block, `identity` its neutral value; every thread gets the result (blockDim.x a multiple of 32, <= 1024)
template <typename T, typename Op> __device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T part[32];
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __syncthreads();                              // part[] may still be read by a previous reduction
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < nwarps ? part[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
struct Sum { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct Max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };

#define NEG_INF __int_as_float(0xff800000)
// this block's row of src0: coordinates (0, i1, i2, i3)
__device__ __forceinline__ void row_coords(const Args& a, i64* c) {
    i64 r = blockIdx.x;
    c[0] = 0; c[1] = r % a.ne0[1]; r /= a.ne0[1]; c[2] = r % a.ne0[2]; c[3] = r / a.ne0[2];
}
#define ROW_LOOP(i) for (i64 i = threadIdx.x; i < a.ne0[0]; i += blockDim.x)
// the row of a warp-per-row kernel: warp w of the grid takes row w over ne0[1..3], as c = (i1, i2, i3);
// false past the last row
__device__ bool warp_row(const Args& a, int* c) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= (int)(a.ne0[1] * a.ne0[2] * a.ne0[3])) return false;
    c[0] = r % (int)a.ne0[1]; r /= (int)a.ne0[1];
    c[1] = r % (int)a.ne0[2]; c[2] = r / (int)a.ne0[2];
    return true;
}

#define FOR_EACH_ELEMENT(a, i) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (a).n; i += (i64)gridDim.x * blockDim.x)
// the same with index type I (i64, or unsigned where fits32)
#define FOR_EACH_ELEMENT_I(a, i, I) \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(a).n; i += (I)gridDim.x * blockDim.x)
// kernel `name` running body<..., unsigned> when a.iop is set (fits32), else body<..., i64>
#define DISPATCH_I(a, body, ...) do { if ((a).iop) body<__VA_ARGS__, unsigned>(a); else body<__VA_ARGS__, i64>(a); } while (0)
