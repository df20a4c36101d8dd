"""pool_2d (max, avg), upscale (nearest, bilinear, bilinear align-corners) and win_part / win_unpart: one thread
per dst element, sources of any strides, F32/F16 converted on load and store. Integer parameters travel packed
as in conv.py (pool_2d: p0 = k0 | k1 << 8 | s0 << 16, p1 = s1 | p0 << 8 | p1 << 16)."""
from __future__ import annotations

from ....types import F16, F32
from .common import C_TYPES, SUFFIX, iparam32

OPS = ("pool_2d", "upscale", "win_part", "win_unpart")
FLOATS = (F32, F16)
UPSCALE_MODES = {("nearest", False): "nearest", ("bilinear", False): "bilinear", ("bilinear", True): "bilinear_ac"}

_TEMPLATE = r"""
// pool_2d: src0 (W, H, C, N) -> dst F32 (OW, OH, C, N); padded positions never win a max, count as 0 in avg
template <typename T, bool MAX> __device__ void pool_2d(const Args& a) {
    const int k0 = a.ip[0], k1 = a.ip[1], s0 = a.ip[2], s1 = a.ip[3], q0 = a.ip[4], q1 = a.ip[5];
    const i64 IW = a.ne0[0], IH = a.ne0[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* in = a.src0 + c[2] * a.nb0[2] + c[3] * a.nb0[3];
        float r = MAX ? -3.402823466e+38f : 0.f;
        for (i64 y = c[1] * s1 - q1; y < c[1] * s1 - q1 + k1; ++y) {
            if (y < 0 || y >= IH) continue;
            for (i64 x = c[0] * s0 - q0; x < c[0] * s0 - q0 + k0; ++x) {
                if (x < 0 || x >= IW) continue;
                const float v = to_f(*(const T*)(in + x * a.nb0[0] + y * a.nb0[1]));
                r = MAX ? fmaxf(r, v) : r + v;
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = MAX ? r : r / (float)(k0 * k1);
    }
}

// the two neighbours j0, j1 of output index i along an axis of n_in inputs and n_out outputs, and j1's weight,
// in float32 as PyTorch's kernels (and the CPU backend) compute them: scale = n_in / n_out,
// src = fma(scale, i + 0.5, -0.5); align-corners: scale = (n_in - 1) / (n_out - 1), src = scale * i
template <bool ALIGN> __device__ __forceinline__ float linear(i64 i, i64 n_in, i64 n_out, i64& j0, i64& j1) {
    float src;
    if (ALIGN) src = n_out > 1 ? __fmul_rn((float)(n_in - 1) / (float)(n_out - 1), (float)i) : 0.f;
    else src = fmaxf(fmaf((float)n_in / (float)n_out, (float)i + 0.5f, -0.5f), 0.f);
    j0 = min((i64)src, n_in - 1);
    j1 = min(j0 + 1, n_in - 1);
    return fminf(fmaxf(src - (float)j0, 0.f), 1.f);
}

// upscale: src0 (W, H, C, N) -> dst (ne0, ne1, ne2, ne3) of the same type; MODE 0 nearest, 1 bilinear,
// 2 bilinear align-corners (dims 2 and 3 always nearest)
template <typename T, int MODE> __device__ void upscale(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* in = a.src0 + (c[2] * a.ne0[2] / a.ne[2]) * a.nb0[2] + (c[3] * a.ne0[3] / a.ne[3]) * a.nb0[3];
        float v;
        if (MODE == 0) {
            const i64 x = c[0] * a.ne0[0] / a.ne[0], y = c[1] * a.ne0[1] / a.ne[1];
            v = to_f(*(const T*)(in + x * a.nb0[0] + y * a.nb0[1]));
        } else {
            i64 x0, x1, y0, y1;
            const float wx = linear<MODE == 2>(c[0], a.ne0[0], a.ne[0], x0, x1);
            const float wy = linear<MODE == 2>(c[1], a.ne0[1], a.ne[1], y0, y1);
            #define AT(x, y) to_f(*(const T*)(in + (x) * a.nb0[0] + (y) * a.nb0[1]))
            v = (1.f - wy) * ((1.f - wx) * AT(x0, y0) + wx * AT(x1, y0)) + wy * ((1.f - wx) * AT(x0, y1) + wx * AT(x1, y1));
            #undef AT
        }
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}

// win_part: src0 (C, W, H, 1) -> dst (C, w, w, npx * npy), window p = py * npx + px, zeros past the image
template <typename T, typename I> __device__ void win_part_i(const Args& a) {
    const I w = (I)a.ne[1], npx = ((I)a.ne0[1] + w - 1) / w;
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I x = (c[3] % npx) * w + c[1], y = (c[3] / npx) * w + c[2];
        float v = 0.f;
        if (x < (I)a.ne0[1] && y < (I)a.ne0[2])
            v = to_f(*(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + x * (I)a.nb0[1] + y * (I)a.nb0[2])));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
template <typename T> __device__ void win_part(const Args& a) { DISPATCH_I(a, win_part_i, T); }

// win_unpart: src0 (C, w, w, npx * npy) -> dst (C, W, H, 1), the inverse of win_part
template <typename T, typename I> __device__ void win_unpart_i(const Args& a) {
    const I w = (I)a.ne0[1], npx = ((I)a.ne[1] + w - 1) / w;
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I p = (c[2] / w) * npx + c[1] / w;
        const T v = *(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + (c[1] % w) * (I)a.nb0[1] + (c[2] % w) * (I)a.nb0[2]
                                          + p * (I)a.nb0[3]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = v;
    }
}
template <typename T> __device__ void win_unpart(const Args& a) { DISPATCH_I(a, win_unpart_i, T); }
"""


def kernel_name(node) -> str:
    t = SUFFIX[node.src[0].type]
    p = node.op_params
    if node.op == "pool_2d":
        return f"pool_2d_{p['op']}_{t}"
    if node.op == "upscale":
        return f"upscale_{UPSCALE_MODES[p['mode'], p['align_corners']]}_{t}"
    return f"{node.op}_{t}"


def supports(node) -> bool:
    if node.op not in OPS or node.src[0].type not in FLOATS:
        return False
    if node.op == "pool_2d":
        return True                               # F32 result of an F32 or F16 source
    if node.op == "upscale":
        return (node.op_params["mode"], node.op_params["align_corners"]) in UPSCALE_MODES
    return node.type == node.src[0].type


def iparam(node) -> int:
    """win_part / win_unpart: 32-bit index math where the tensors fit."""
    return iparam32(node) if node.op in ("win_part", "win_unpart") else 0


def params(node) -> tuple:
    return ()


def int_params(node) -> tuple:
    """pool_2d's (k0, k1, s0, s1, p0, p1) as Args.ip."""
    if node.op != "pool_2d":
        return ()
    p = node.op_params
    return (*p["k"], *p["s"], *p["p"])


def _instances():
    for t in FLOATS:
        ct, st = C_TYPES[t], SUFFIX[t]
        yield f"pool_2d_max_{st}", f"pool_2d<{ct}, true>"
        yield f"pool_2d_avg_{st}", f"pool_2d<{ct}, false>"
        for k, mode in enumerate(("nearest", "bilinear", "bilinear_ac")):
            yield f"upscale_{mode}_{st}", f"upscale<{ct}, {k}>"
        yield f"win_part_{st}", f"win_part<{ct}>"
        yield f"win_unpart_{st}", f"win_unpart<{ct}>"


def source() -> str:
    return _TEMPLATE + "".join(f'extern "C" __global__ void {name}(const Args a) {{ {call}(a); }}\n'
                                        for name, call in _instances())
