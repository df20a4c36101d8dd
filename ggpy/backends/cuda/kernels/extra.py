"""The remaining core ops on CUDA: diag_mask_inf, group_norm, get_rel_pos and add_rel_pos (F32 and F16, sources
with any strides).

diag_mask_inf and get_rel_pos: one thread per dst element (grid-stride). group_norm: one block per (group,
batch), sums in double, two passes (mean, then variance) as the CPU and the reference. add_rel_pos reads three
tensors: its kernel takes the usual Args (a, pw) and ph's address as a second kernel argument."""
from __future__ import annotations

import ctypes

from ....types import F16, F32
from .common import C_TYPES, SUFFIX

OPS = ("diag_mask_inf", "group_norm", "get_rel_pos", "add_rel_pos")
FLOATS = (F32, F16)

_SOURCE = r"""
// a[..., i1, i0] = -inf where i0 > n_past + i1; p0: n_past
template <typename T> __device__ void diag_mask_inf_k(const Args& a) {
    const i64 n_past = (i64)a.p0;
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        float v = c[0] > n_past + c[1] ? __int_as_float(0xff800000) : to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
// dst (C, kh, qh): dst[q, k, :] = a[(kh - 1 - k) + q, :]
template <typename T> __device__ void get_rel_pos_k(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        i64 s[4] = {c[0], a.ne[1] - 1 - c[1] + c[2], 0, 0};
        *(T*)(a.dst + byte_offset(c, a.nb)) = *(const T*)(a.src0 + byte_offset(s, a.nb0));
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
// dst = a + ph[kh, qw, qh, b] + pw[kw, qw, qh, b] with a (K*K, QW*QH, ...) = (kw + K kh, qw + QW qh, b); src1 = pw
template <typename T, typename P> __device__ void add_rel_pos_k(const Args& a, const char* ph) {
    const i64 k = a.ne1[0], qw = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        const i64 b = c[2] + c[3] * a.ne[2];
        const i64 q[4] = {0, c[1] % qw, c[1] / qw, b};
        const i64 base = q[1] * a.nb1[1] + q[2] * a.nb1[2] + q[3] * a.nb1[3];
        float w = to_f(*(const P*)(a.src1 + base + (c[0] % k) * a.nb1[0]));
        float h = to_f(*(const P*)(ph + base + (c[0] / k) * a.nb1[0]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0))) + h + w);
    }
}
"""

GROUP_BLOCK = 256


def kernel_name(node) -> str:
    t = SUFFIX[node.src[0].type]
    if node.op == "add_rel_pos":
        return f"add_rel_pos_{t}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{t}"


def supports(node) -> bool:
    srcs = [s for s in node.src if s is not None]
    if node.op not in OPS or not srcs or any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return False
    if node.op == "add_rel_pos":
        pw, ph = node.src[1], node.src[2]
        return len(srcs) == 3 and pw.type == ph.type and pw.nb == ph.nb
    if node.op == "group_norm":
        return node.src[0].ne[3] < 65536 and node.op_params["n_groups"] < 2 ** 31
    return True


def refusal(node) -> str | None:
    if node.op == "add_rel_pos" and len(node.src) == 3 and node.src[1].nb != node.src[2].nb:
        return "add_rel_pos on CUDA needs pw and ph with the same strides"
    return None


def params(node) -> tuple:
    if node.op == "diag_mask_inf":
        return (node.op_params["n_past"],)
    if node.op == "group_norm":
        c, g = node.src[0].ne[2], node.op_params["n_groups"]
        return ((c + g - 1) // g, node.op_params["eps"])
    return ()


def launch_config(node):
    if node.op == "group_norm":
        return (node.op_params["n_groups"], node.src[0].ne[3]), GROUP_BLOCK
    return None


def steps(backend, node) -> list:
    """One launch; add_rel_pos's gets ph's address as its second kernel argument."""
    a = node.src[0]
    ptr = node.buffer.tensor_ptr
    if node.op != "add_rel_pos":
        return [backend.launch(node, kernel_name(node), ptr(node), node, [(a.buffer.tensor_ptr(a), a)],
                               params(node), launch_config(node))]
    pw, ph = node.src[1], node.src[2]
    launch = backend.launch(node, kernel_name(node), ptr(node), node,
                            [(a.buffer.tensor_ptr(a), a), (pw.buffer.tensor_ptr(pw), pw)])
    extra = ctypes.c_void_p(ph.buffer.tensor_ptr(ph))
    launch.args = (launch.args, extra)
    launch.params = (ctypes.c_void_p * 2)(ctypes.addressof(launch.args[0]), ctypes.addressof(extra))
    return [launch]


def source() -> str:
    parts = [_SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        for name in ("diag_mask_inf", "get_rel_pos", "group_norm"):
            parts.append(f'extern "C" __global__ void {name}_{s}(const Args a) {{ {name}_k<{c}>(a); }}\n')
        for p in FLOATS:
            parts.append(f'extern "C" __global__ void add_rel_pos_{s}_{SUFFIX[p]}(const Args a, const char* ph) '
                         f'{{ add_rel_pos_k<{c}, {C_TYPES[p]}>(a, ph); }}\n')
    return "".join(parts)
