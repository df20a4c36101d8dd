"""What every kernel shares: the launch-argument struct (C and ctypes twins), F16 conversion, indexing,
block reductions and the default launch shape.

A kernel takes one `Args` by value: the dst pointer and up to two sources, each with ne and nb (bytes) in
ggml order, and two float parameters. By default every thread handles elements of dst at a flat index in ne
order (grid-stride); a family may choose its own grid and block per node with `launch_config(node)`.
"""
from __future__ import annotations

import ctypes

from ....types import F16, F32, I32

C_TYPES = {F32: "float", F16: "half_t", I32: "int"}
SUFFIX = {F32: "f32", F16: "f16", I32: "i32"}

HEADER = r"""
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
};

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(half_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ half_t from_f<half_t>(float x) {
    half_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;
}
template <typename D, typename S> __device__ __forceinline__ D convert(S x) { return from_f<D>(to_f(x)); }
template <> __device__ __forceinline__ int convert<int, int>(int x) { return x; }

// the coordinates (i0..i3) of flat index i in ne order
__device__ __forceinline__ void unravel(i64 i, const i64* ne, i64* c) {
    c[0] = i % ne[0]; i /= ne[0];
    c[1] = i % ne[1]; i /= ne[1];
    c[2] = i % ne[2]; c[3] = i / ne[2];
}
__device__ __forceinline__ i64 byte_offset(const i64* c, const i64* nb) {
    return c[0] * nb[0] + c[1] * nb[1] + c[2] * nb[2] + c[3] * nb[3];
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

#define FOR_EACH_ELEMENT(a, i) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (a).n; i += (i64)gridDim.x * blockDim.x)
"""

_I64x4 = ctypes.c_int64 * 4
BLOCK = 256
MAX_BLOCKS = 1 << 16        # grid-stride kernels loop over the rest


def elementwise_config(node) -> tuple[int, int]:
    """(grid, block) of a grid-stride kernel over dst's elements: the default launch shape."""
    return min(MAX_BLOCKS, (node.nelements + BLOCK - 1) // BLOCK), BLOCK


class Args(ctypes.Structure):
    """The C `struct Args` above, filled once per node when a graph's launches are prepared."""

    _fields_ = [("dst", ctypes.c_void_p), ("src0", ctypes.c_void_p), ("src1", ctypes.c_void_p),
                ("n", ctypes.c_int64),
                ("ne", _I64x4), ("nb", _I64x4), ("ne0", _I64x4), ("nb0", _I64x4), ("ne1", _I64x4), ("nb1", _I64x4),
                ("p0", ctypes.c_float), ("p1", ctypes.c_float), ("src2", ctypes.c_void_p)]


def pack_args(dst_ptr: int, dst, srcs: list, params: tuple = ()) -> Args:
    """Args for `dst` (a tensor) at `dst_ptr` and up to two (pointer, tensor) sources; a third source's
    pointer alone goes to src2 (its layout is the kernel's to know)."""
    a = Args(dst=dst_ptr, n=dst.nelements, ne=_I64x4(*dst.ne), nb=_I64x4(*dst.nb))
    if len(srcs) > 2:
        a.src2 = srcs[2][0]
    for k, (ptr, t) in enumerate(srcs[:2]):
        setattr(a, f"src{k}", ptr)
        setattr(a, f"ne{k}", _I64x4(*t.ne))
        setattr(a, f"nb{k}", _I64x4(*t.nb))
    for k, p in enumerate(params):
        setattr(a, f"p{k}", float(p))
    return a
