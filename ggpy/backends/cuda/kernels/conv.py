"""im2col (1-D, 2-D), conv_1d, conv_2d, conv_2d_dw (WHCN and CWHN) and conv_transpose_2d: one thread per dst
element, each summing its taps directly (no im2col matrix, no scratch). Every source may have any strides, dst
is written through its nb (so conv_2d_dw's CWHN result keeps its layout). Math runs in float.

The integer parameters (strides, paddings, dilations, each < 256) travel packed three to a float parameter:
p0 = s0 | s1 << 8 | d0 << 16, p1 = p0 | p1 << 8 | d1 << 16 (24-bit integers, exact in float).
"""
from __future__ import annotations

from ....types import F16, F32
from .common import C_TYPES, SUFFIX

OPS = ("im2col", "conv_1d", "conv_2d", "conv_2d_dw", "conv_transpose_2d")
FLOATS = (F32, F16)
MAX_PARAM = 255

UNPACK = r"""
#ifndef GGPY_UNPACK3
#define GGPY_UNPACK3
// three 8-bit integers packed into a float parameter (see pack3)
__device__ __forceinline__ void unpack3(float p, int& x, int& y, int& z) {
    int v = (int)p; x = v & 255; y = (v >> 8) & 255; z = v >> 16;
}
#endif
"""

_TEMPLATE = r"""
// the conv parameters s0, s1, d0 (from p0) and p0, p1, d1 (from p1)
#define CONV_PARAMS(a) int s0, s1, d0, q0, q1, d1; unpack3((a).p0, s0, s1, d0); unpack3((a).p1, q0, q1, d1)

// im2col: src1 b = (IW, IH, IC, N) or 1-D (IL, IC, N); dst = (IC*KH*KW, OW, OH, N) or (IC*K, OL, N)
template <typename S, typename D, bool TWO_D> __device__ void im2col(const Args& a) {
    CONV_PARAMS(a);
    const i64 KW = a.ne0[0], KH = TWO_D ? a.ne0[1] : 1, IW = a.ne1[0], IH = TWO_D ? a.ne1[1] : 1;
    const i64 nbc = a.nb1[TWO_D ? 2 : 1], nbn = a.nb1[TWO_D ? 3 : 2];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const i64 kw = c[0] % KW, kh = (c[0] / KW) % KH, ic = c[0] / (KW * KH);
        const i64 oh = TWO_D ? c[2] : 0, n = TWO_D ? c[3] : c[2];
        const i64 x = c[1] * s0 + kw * d0 - q0, y = oh * s1 + kh * d1 - q1;
        float v = 0.f;
        if (x >= 0 && x < IW && y >= 0 && y < IH)
            v = to_f(*(const S*)(a.src1 + x * a.nb1[0] + y * a.nb1[1] + ic * nbc + n * nbn));
        *(D*)(a.dst + byte_offset(c, a.nb)) = from_f<D>(v);
    }
}

// conv: kernel src0 (KW, KH, Cin, Cout) or 1-D (K, Cin, Cout), input src1 as im2col's; dst F32 (OW, OH, Cout, N)
// or 1-D (OL, Cout, N)
template <typename TA, typename TB, bool TWO_D> __device__ void conv(const Args& a) {
    CONV_PARAMS(a);
    const i64 KW = a.ne0[0], KH = TWO_D ? a.ne0[1] : 1, CI = a.ne0[TWO_D ? 2 : 1];
    const i64 IW = a.ne1[0], IH = TWO_D ? a.ne1[1] : 1;
    const i64 kbc = a.nb0[TWO_D ? 2 : 1], kbo = a.nb0[TWO_D ? 3 : 2];
    const i64 nbc = a.nb1[TWO_D ? 2 : 1], nbn = a.nb1[TWO_D ? 3 : 2];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const i64 oh = TWO_D ? c[1] : 0, co = c[TWO_D ? 2 : 1], n = c[TWO_D ? 3 : 2];
        const char* k = a.src0 + co * kbo;
        const char* in = a.src1 + n * nbn;
        float sum = 0.f;
        for (i64 kh = 0; kh < KH; ++kh) {
            const i64 y = oh * s1 + kh * d1 - q1;
            if (y < 0 || y >= IH) continue;
            for (i64 kw = 0; kw < KW; ++kw) {
                const i64 x = c[0] * s0 + kw * d0 - q0;
                if (x < 0 || x >= IW) continue;
                const char* kp = k + kw * a.nb0[0] + kh * a.nb0[1];
                const char* ip = in + x * a.nb1[0] + y * a.nb1[1];
                for (i64 ci = 0; ci < CI; ++ci)
                    sum += to_f(*(const TA*)(kp + ci * kbc)) * to_f(*(const TB*)(ip + ci * nbc));
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}

// depthwise: kernel src0 (KW, KH, 1, C), input src1 (W, H, C, N) any strides; dst F32 (OW, OH, C, N) by its nb
template <typename TA, typename TB> __device__ void conv_dw(const Args& a) {
    CONV_PARAMS(a);
    const i64 KW = a.ne0[0], KH = a.ne0[1], IW = a.ne1[0], IH = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* k = a.src0 + c[2] * a.nb0[3];
        const char* in = a.src1 + c[2] * a.nb1[2] + c[3] * a.nb1[3];
        float sum = 0.f;
        for (i64 kh = 0; kh < KH; ++kh) {
            const i64 y = c[1] * s1 + kh * d1 - q1;
            if (y < 0 || y >= IH) continue;
            for (i64 kw = 0; kw < KW; ++kw) {
                const i64 x = c[0] * s0 + kw * d0 - q0;
                if (x < 0 || x >= IW) continue;
                sum += to_f(*(const TA*)(k + kw * a.nb0[0] + kh * a.nb0[1]))
                     * to_f(*(const TB*)(in + x * a.nb1[0] + y * a.nb1[1]));
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}

// transposed: kernel src0 (KW, KH, Cout, Cin), input src1 (W, H, Cin, N), stride p0; dst F32 (OW, OH, Cout, N).
// Output (ox, oy) gathers the input pixels (ix, iy) with ix * s + kx = ox, iy * s + ky = oy.
template <typename TA, typename TB> __device__ void conv_transpose(const Args& a) {
    const i64 s = (i64)a.p0, KW = a.ne0[0], KH = a.ne0[1], CI = a.ne0[3], IW = a.ne1[0], IH = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* k = a.src0 + c[2] * a.nb0[2];
        const char* in = a.src1 + c[3] * a.nb1[3];
        float sum = 0.f;
        for (i64 ky = c[1] % s; ky < KH; ky += s) {
            const i64 iy = (c[1] - ky) / s;
            if (iy < 0 || iy >= IH) continue;
            for (i64 kx = c[0] % s; kx < KW; kx += s) {
                const i64 ix = (c[0] - kx) / s;
                if (ix < 0 || ix >= IW) continue;
                const char* kp = k + kx * a.nb0[0] + ky * a.nb0[1];
                const char* ip = in + ix * a.nb1[0] + iy * a.nb1[1];
                for (i64 ci = 0; ci < CI; ++ci)
                    sum += to_f(*(const TA*)(kp + ci * a.nb0[3])) * to_f(*(const TB*)(ip + ci * a.nb1[2]));
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}
"""


def pack3(x: int, y: int, z: int) -> float:
    """Three integers in [0, 255] as one float parameter (unpack3 in C)."""
    return float(x | y << 8 | z << 16)


def _conv_params(node) -> tuple:
    p = node.op_params
    return pack3(p["s0"], p["s1"], p["d0"]), pack3(p["p0"], p["p1"], p["d1"])


def kernel_name(node) -> str:
    a, b = node.src[0], node.src[1]
    if node.op == "im2col":
        return f"im2col_{'2d' if node.op_params['is_2D'] else '1d'}_{SUFFIX[b.type]}_{SUFFIX[node.type]}"
    return f"{node.op}_{SUFFIX[a.type]}_{SUFFIX[b.type]}"


def supports(node) -> bool:
    if node.op not in OPS:
        return False
    a, b = node.src[0], node.src[1]
    if b.type not in FLOATS or node.type not in FLOATS or (node.op != "im2col" and a.type not in FLOATS):
        return False
    return all(v <= MAX_PARAM for v in node.op_params.values())


def params(node) -> tuple:
    if node.op == "conv_transpose_2d":
        return (node.op_params["stride"],)
    return _conv_params(node)


def _instances():
    for tb in FLOATS:
        for td in FLOATS:
            for two_d in (False, True):
                name = f"im2col_{'2d' if two_d else '1d'}_{SUFFIX[tb]}_{SUFFIX[td]}"
                yield name, f"im2col<{C_TYPES[tb]}, {C_TYPES[td]}, {str(two_d).lower()}>"
    for ta in FLOATS:
        for tb in FLOATS:
            types = f"{C_TYPES[ta]}, {C_TYPES[tb]}"
            pair = f"{SUFFIX[ta]}_{SUFFIX[tb]}"
            yield f"conv_1d_{pair}", f"conv<{types}, false>"
            yield f"conv_2d_{pair}", f"conv<{types}, true>"
            yield f"conv_2d_dw_{pair}", f"conv_dw<{types}>"
            yield f"conv_transpose_2d_{pair}", f"conv_transpose<{types}>"


def source() -> str:
    return UNPACK + _TEMPLATE + "".join(f'extern "C" __global__ void {name}(const Args a) {{ {call}(a); }}\n'
                                        for name, call in _instances())
