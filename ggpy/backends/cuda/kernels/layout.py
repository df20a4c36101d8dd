"""concat, pad (zero padding before and after each dimension), repeat and get_rows: one thread per dst element
(grid-stride), sources with any strides. get_rows: a.ne = (K, R, A2, A3), b I32 (n, A2, A3) -> (K, n, A2, A3),
F32 (I32 for I32 rows). pad's four leading paddings (< 4096 each) travel two to a float parameter."""
from __future__ import annotations

from ....types import F16, F32, I32
from .common import C_TYPES, SUFFIX

OPS = ("concat", "pad", "repeat", "get_rows")
TYPES = (F32, F16, I32)
MAX_PAD = 4096

_SOURCE = r"""
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
"""


def kernel_name(node) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def supports(node) -> bool:
    if node.op not in OPS or node.src[0] is None or node.src[0].type not in TYPES:
        return False
    a, b = node.src[0], node.src[1] if len(node.src) > 1 else None
    if node.op == "get_rows":
        return b is not None and b.type == I32 and node.type == (I32 if a.type == I32 else F32)
    if node.op == "pad":
        return a.type in (F32, F16) and all(p < MAX_PAD for p in node.op_params["lp"])
    return node.type == a.type and (node.op != "concat" or b.type == a.type)


def params(node) -> tuple:
    if node.op == "concat":
        return (node.op_params["dim"],)
    if node.op == "pad":
        lp = node.op_params["lp"]
        return lp[0] | lp[1] << 12, lp[2] | lp[3] << 12
    return ()


def source() -> str:
    parts = [_SOURCE]
    for t in TYPES:
        c, s = C_TYPES[t], SUFFIX[t]
        out = "int" if t == I32 else "float"
        parts.append(f'extern "C" __global__ void concat_{s}(const Args a) {{ concat_k<{c}>(a); }}\n'
                     f'extern "C" __global__ void repeat_{s}(const Args a) {{ repeat_k<{c}>(a); }}\n'
                     f'extern "C" __global__ void get_rows_{s}(const Args a) {{ get_rows_k<{c}, {out}>(a); }}\n')
        if t != I32:
            parts.append(f'extern "C" __global__ void pad_{s}(const Args a) {{ pad_k<{c}>(a); }}\n')
    return "".join(parts)
