"""norm, rms_norm (one block per row; short LayerNorm rows with their affine one warp per row) and group_norm
(one block per (group, batch), sums in double, two passes as the CPU and the reference); F32 and F16, sources
with any strides. A norm followed by mul(weight) and add(bias) runs fused as norm_affine (the epilogue pattern of
ggpy/graph/fusion.py)."""
from __future__ import annotations

from ....optable import ACTIVATIONS
from ..registry import register
from .common import C_TYPES, FLOATS, SUFFIX, row_launch, rows, tensor_ptr, vector_rows
from .elementwise import epilogue_act_source

NORM_WARP_MAX = 32 * 16             # LayerNorm rows up to this long: one warp per row (norm_affine_warp)
NORM_WARP_BLOCK = 128
NORM_VEC_MAX = 128 * 4              # rows up to this long, contiguous, a multiple of 4: norm_affine_vec
GROUP_BLOCK = 256

_SOURCE = r"""
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
"""



def refusal(node) -> str | None:
    x = node.src[0]
    if x.type not in FLOATS or node.type != x.type:
        return f"{node.op} on CUDA takes F32/F16 with a result of the same type; got {x.type.name} -> {node.type.name}"
    if node.op == "group_norm" and (x.ne[3] >= 65536 or node.op_params["n_groups"] >= 2 ** 31):
        return "group_norm on CUDA takes fewer than 65536 images and 2^31 groups"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def params(node) -> tuple:
    if node.op == "group_norm":
        c, g = node.src[0].ne[2], node.op_params["n_groups"]
        return ((c + g - 1) // g, node.op_params["eps"])
    return (node.op_params["eps"],)


def launch_config(node) -> tuple:
    """group_norm: one block per (group, image); norm, rms_norm: one block per row, threads by row length."""
    if node.op == "group_norm":
        return (node.op_params["n_groups"], node.src[0].ne[3]), GROUP_BLOCK
    return row_launch(node)


def norm_affine_steps(backend, node, fused) -> list:
    """A norm with its affine (a fused Epilogue: scale and bias row vectors of the norm's type, optionally an
    activation) as one row kernel writing the last node's memory (the add's or the activation's)."""
    add = fused.last
    x = node.src[0]
    n = x.ne[0]
    block = 32 if n <= 256 else 128 if n <= 1024 else 256
    config, name = (rows(node), block), f"norm_affine_{SUFFIX[x.type]}"
    if n <= NORM_WARP_MAX and all(abs(nb) * k < 1 << 31 for t in (x, add) for k, nb in zip(t.ne, t.nb)):
        config, name = (-(-rows(node) // (NORM_WARP_BLOCK // 32)), NORM_WARP_BLOCK), f"norm_affine_warp_{SUFFIX[x.type]}"
        ptrs, align = [tensor_ptr(t) for t in (x, add, fused.scale, fused.bias)], x.type.size * 4
        if n <= NORM_VEC_MAX and n % 4 == 0 and vector_rows(x, ptrs, align) and vector_rows(add, (), align):
            name = f"norm_affine_vec_{SUFFIX[x.type]}"
    srcs = [(tensor_ptr(x), x), (tensor_ptr(fused.scale), fused.scale), (tensor_ptr(fused.bias), fused.bias)]
    launch = backend.launch(node, name, tensor_ptr(add), add, srcs, params(node), config, ACTIVATIONS.get(fused.act, 0))
    launch.name = fused.name(launch.name)
    return [launch]


def source() -> str:
    parts = [epilogue_act_source(), _SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        for name, body in (("norm", f"norm_row<{c}, false>"), ("rms_norm", f"norm_row<{c}, true>"),
                           ("norm_affine", f"norm_affine_row<{c}>"), ("norm_affine_warp", f"norm_affine_warp<{c}>"),
                           ("norm_affine_vec", f"norm_affine_vec<{c}>"),
                           ("group_norm", f"group_norm_k<{c}>")):
            parts.append(f'extern "C" __global__ void {name}_{s}(const Args a) {{ {body}(a); }}\n')
    return "".join(parts)


register(ops=("norm", "rms_norm", "group_norm"), source=source, refusal=refusal, kernel_name=kernel_name,
         params=params, launch_config=launch_config)
