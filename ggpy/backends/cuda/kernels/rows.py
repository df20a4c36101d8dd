"""Row kernels, one block per row of src0 (ne[0] elements, any strides): norm, rms_norm, soft_max (with an
optional F32/F16 mask broadcast over dims 2 and 3, scale and ALiBi slopes), sum_rows, mean and argmax; and sum
(one block over every element). Sums accumulate in double; F16 is converted on load and store."""
from __future__ import annotations

from ....types import F16, F32, I32
from .common import C_TYPES, SUFFIX

OPS = ("norm", "rms_norm", "soft_max", "sum_rows", "mean", "sum", "argmax")
FLOATS = (F32, F16)
PARAMS = {"norm": ("eps",), "rms_norm": ("eps",), "soft_max": ("scale", "max_bias")}

_SOURCE = r"""
#define NEG_INF __int_as_float(0xff800000)
// this block's row of src0: coordinates (0, i1, i2, i3)
__device__ __forceinline__ void row_coords(const Args& a, i64* c) {
    i64 r = blockIdx.x;
    c[0] = 0; c[1] = r % a.ne0[1]; r /= a.ne0[1]; c[2] = r % a.ne0[2]; c[3] = r / a.ne0[2];
}
#define ROW_LOOP(i) for (i64 i = threadIdx.x; i < a.ne0[0]; i += blockDim.x)
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

// LayerNorm with its affine fused (norm -> mul(weight) -> add(bias)): src1 the F32 weight, src2 the F32 bias
// (contiguous, ne0[0] each); dst F32 (the add's memory) by its nb. Sums in float over the row held in registers
// when it fits (ne0[0] <= 8 * blockDim.x), else re-read.
template <typename T> __device__ void norm_affine_row(const Args& a) {      // p0: eps
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0); char* y = a.dst + byte_offset(c, a.nb);
    const float* w = (const float*)a.src1; const float* b = (const float*)a.src2;
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
        if (i < n) *(float*)(y + i * a.nb[0]) = (v[j] - mean) * inv * w[i] + b[i];
    }
    for (int i = threadIdx.x + 8 * blockDim.x; i < n; i += blockDim.x)
        *(float*)(y + i * a.nb[0]) = (X(i) - mean) * inv * w[i] + b[i];
}

// the row of a warp-per-row kernel: warp w of the grid takes row w over ne0[1..3], as c = (i1, i2, i3);
// false past the last row
__device__ bool warp_row(const Args& a, int* c) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= (int)(a.ne0[1] * a.ne0[2] * a.ne0[3])) return false;
    c[0] = r % (int)a.ne0[1]; r /= (int)a.ne0[1];
    c[1] = r % (int)a.ne0[2]; c[2] = r / (int)a.ne0[2];
    return true;
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
    const float* w = (const float*)a.src1; const float* b = (const float*)a.src2;
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
        if (i < n) *(float*)(y + i * ys) = (v[j] - mean) * inv * w[i] + b[i];
    }
}

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

// the first index of the row's largest element, written as int to dst[i1]
template <typename T> __device__ void argmax_row(const Args& a) {
    i64 c[4]; row_coords(a, c);
    const char* x = a.src0 + byte_offset(c, a.nb0);
    float best = NEG_INF; int at = 0x7fffffff;
    ROW_LOOP(i) { float v = X(i); if (v > best || at == 0x7fffffff) { best = v; at = (int)i; } }
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o); int i2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (b2 > best || (b2 == best && i2 < at)) { best = b2; at = i2; }
    }
    __shared__ float sb[32]; __shared__ int si[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sb[warp] = best; si[warp] = at; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w)
            if (sb[w] > best || (sb[w] == best && si[w] < at)) { best = sb[w]; at = si[w]; }
        *(int*)(a.dst + c[1] * a.nb[0]) = at;
    }
}
#undef X
"""


def _rows(node) -> int:
    s = node.src[0]
    return s.ne[1] * s.ne[2] * s.ne[3]


SOFT_MAX_WARP_MAX = 32 * 8          # rows up to this long run one warp per row (soft_max_warp)
SOFT_MAX_WARP_BLOCK = 128
NORM_WARP_MAX = 32 * 16             # LayerNorm rows up to this long: one warp per row (norm_affine_warp)
NORM_WARP_BLOCK = 128


def _soft_max_warp(node) -> bool:
    """Whether soft_max runs one warp per row: short rows, 32-bit row offsets within the tensors."""
    if node.op != "soft_max" or node.src[0].ne[0] > SOFT_MAX_WARP_MAX:
        return False
    ts = [t for t in (node, node.src[0], node.src[1] if len(node.src) > 1 else None) if t is not None]
    return all(abs(nb) * n < 1 << 31 for t in ts for n, nb in zip(t.ne, t.nb))


def launch_config(node) -> tuple:
    """One block per row (one block in all for sum); threads by row length. Short soft_max rows: a warp each."""
    if _soft_max_warp(node):
        return -(-_rows(node) // (SOFT_MAX_WARP_BLOCK // 32)), SOFT_MAX_WARP_BLOCK
    n = node.src[0].ne[0]
    block = 32 if n <= 64 else 256 if n <= 4096 else 1024
    return (1 if node.op == "sum" else _rows(node)), (1024 if node.op == "sum" else block)


def norm_affine_steps(backend, node, fused) -> list:
    """A norm with its affine (fused: the CPU backend's Epilogue, scale and bias F32 row vectors) as one row
    kernel writing the add's memory."""
    from ..backend import tensor_ptr
    add = fused.add_node
    x = node.src[0]
    n = x.ne[0]
    block = 32 if n <= 256 else 128 if n <= 1024 else 256
    config, name = (_rows(node), block), f"norm_affine_{SUFFIX[x.type]}"
    if n <= NORM_WARP_MAX and all(abs(nb) * k < 1 << 31 for t in (x, add) for k, nb in zip(t.ne, t.nb)):
        config, name = (-(-_rows(node) // (NORM_WARP_BLOCK // 32)), NORM_WARP_BLOCK), f"norm_affine_warp_{SUFFIX[x.type]}"
    return [backend.launch(node, name, tensor_ptr(add), add, [(tensor_ptr(x), x), (tensor_ptr(fused.scale), fused.scale),
                                                             (tensor_ptr(fused.bias), fused.bias)], params(node), config)]


def kernel_name(node) -> str:
    t = SUFFIX[node.src[0].type]
    op = "soft_max_warp" if _soft_max_warp(node) else node.op
    if node.op == "soft_max" and len(node.src) > 1 and node.src[1] is not None:
        return f"{op}_{t}_{SUFFIX[node.src[1].type]}"
    return f"{op}_{t}"


def supports(node) -> bool:
    srcs = [s for s in node.src if s is not None]
    if node.op not in OPS or not srcs or any(s.type not in FLOATS for s in srcs):
        return False
    out = I32 if node.op == "argmax" else srcs[0].type
    return node.type == out and _rows(node) < 2 ** 31


def params(node) -> tuple:
    return tuple(node.op_params[k] for k in PARAMS.get(node.op, ()))


def source() -> str:
    parts = [_SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        for name, body in (("norm", f"norm_row<{c}, false>"), ("rms_norm", f"norm_row<{c}, true>"),
                           ("soft_max", f"soft_max_row<{c}, float>"), ("sum_rows", f"sum_row<{c}, false>"),
                           ("mean", f"sum_row<{c}, true>"), ("sum", f"sum_all<{c}>"), ("argmax", f"argmax_row<{c}>")):
            parts.append(f'extern "C" __global__ void {name}_{s}(const Args a) {{ {body}(a); }}\n')
        parts.append(f'extern "C" __global__ void norm_affine_{s}(const Args a) {{ norm_affine_row<{c}>(a); }}\n')
        parts.append(f'extern "C" __global__ void norm_affine_warp_{s}(const Args a) {{ norm_affine_warp<{c}>(a); }}\n')
        parts.append(f'extern "C" __global__ void soft_max_warp_{s}(const Args a) {{ soft_max_warp<{c}, float>(a); }}\n')
        for m in FLOATS:
            parts.append(f'extern "C" __global__ void soft_max_{s}_{SUFFIX[m]}(const Args a) '
                         f'{{ soft_max_row<{c}, {C_TYPES[m]}>(a); }}\n')
            parts.append(f'extern "C" __global__ void soft_max_warp_{s}_{SUFFIX[m]}(const Args a) '
                         f'{{ soft_max_warp<{c}, {C_TYPES[m]}>(a); }}\n')
    return "".join(parts)
