"""What every kernel shares: the launch-argument struct (C and ctypes twins), F16 conversion, indexing,
block reductions, the row helpers of row-wise kernels, the default launch shape, and device addresses.

A kernel takes one `Args` by value: the dst pointer and up to two sources, each with ne and nb (bytes) in
ggml order, and two float parameters. By default every thread handles elements of dst at a flat index in ne
order (grid-stride); a family may choose its own grid and block per node with `launch_config(node)`.
"""
from __future__ import annotations

import ctypes

from ....errors import AllocationError
from ....types import BF16, F16, F32, I32, QUANT_TYPES

FLOATS = (F32, F16, BF16)
C_TYPES = {F32: "float", F16: "half_t", BF16: "bf16_t", I32: "int"}
SUFFIX = {F32: "f32", F16: "f16", BF16: "bf16", I32: "i32"} | {t: t.name for t in QUANT_TYPES}   # kernel names

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
    int iop;                                      // an integer parameter (fused epilogues: the activation)
    int ip[6];                                    // integer op parameters (conv: s0 s1 d0 p0 p1 d1; pool: k s p)
};

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
"""


def fits32(*tensors) -> bool:
    """Whether 32-bit index math covers these tensors (None entries ignored): fewer than 2^31 elements and byte
    extents (from the first element to past the last) under 2^31, strides not negative."""
    for t in tensors:
        if t is None:
            continue
        if t.nelements >= 1 << 31 or any(nb < 0 for nb in t.nb):
            return False
        if sum((n - 1) * nb for n, nb in zip(t.ne, t.nb)) + t.type.size >= 1 << 31:
            return False
    return True


def vector_rows(t, ptrs, align: int) -> bool:
    """Whether t's rows (dim 0) are contiguous and every row start and the given addresses fall on `align` bytes:
    kernels may then move 4 elements at once (load4 / store4)."""
    return t.nb[0] == t.type.size and all(nb % align == 0 for nb in t.nb[1:]) and all(p % align == 0 for p in ptrs)


def iparam32(node) -> int:
    """The `iop` of kernels dispatching on index width (DISPATCH_I): 1 when the node and its sources fit32."""
    return int(fits32(node, *node.src[:2]))

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
                ("p0", ctypes.c_float), ("p1", ctypes.c_float), ("src2", ctypes.c_void_p), ("iop", ctypes.c_int),
                ("ip", ctypes.c_int * 6)]


def pack_args(dst_ptr: int, dst, srcs: list, params: tuple = (), iop: int = 0, ints: tuple = ()) -> Args:
    """Args for `dst` (a tensor) at `dst_ptr` and up to two (pointer, tensor) sources; a third source's
    pointer alone goes to src2 (its layout is the kernel's to know); `params` the float parameters p0, p1,
    `iop` an integer parameter, `ints` up to six more (ip)."""
    if len(ints) > 6 or any(not -2**31 <= v < 2**31 for v in ints):
        raise ValueError(f"pack_args: integer parameters {ints}; expected at most 6 values in int32 range")
    a = Args(dst=dst_ptr, n=dst.nelements, ne=_I64x4(*dst.ne), nb=_I64x4(*dst.nb), iop=iop,
             ip=(ctypes.c_int * 6)(*ints))
    if len(srcs) > 2:
        a.src2 = srcs[2][0]
    for k, (ptr, t) in enumerate(srcs[:2]):
        setattr(a, f"src{k}", ptr)
        setattr(a, f"ne{k}", _I64x4(*t.ne))
        setattr(a, f"nb{k}", _I64x4(*t.nb))
    for k, p in enumerate(params):
        setattr(a, f"p{k}", float(p))
    return a


def tensor_ptr(t) -> int:
    """The device address of t's first element (AllocationError when t is not in CUDA memory)."""
    buf = t.buffer
    if buf is None or buf.buffer_type.is_host or not hasattr(buf, "tensor_ptr"):
        raise AllocationError(f"cuda: tensor '{t.name}' (op {t.op}) is not in CUDA memory ({type(buf).__name__}); "
                              "plan the graph with ggpy.GraphAllocator(cuda_backend)")
    return buf.tensor_ptr(t)


def extent(t) -> tuple[int, int]:
    """[first, past the last) device address of t's elements."""
    p = tensor_ptr(t)
    return p, p + max(t.nbytes, t.type.size)


def rows(node) -> int:
    """The rows (dims 1-3) of the node's first source: the blocks of a row-wise kernel."""
    s = node.src[0]
    return s.ne[1] * s.ne[2] * s.ne[3]


def row_launch(node) -> tuple:
    """(grid, block) of a block-per-row kernel: one block per row, threads by row length."""
    n = node.src[0].ne[0]
    return rows(node), (32 if n <= 64 else 256 if n <= 4096 else 1024)
