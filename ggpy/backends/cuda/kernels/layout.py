"""Copies and layout on CUDA: dup, cont (and cont_Nd), cast and cpy (elements taken from src0 and written to dst in ne
order, any strides on both sides, float types (F32, F16, BF16) converted, I32 copied as is; for cpy dst is the view of b the node
describes; 32-bit index math where the tensors fit), concat, pad (zero padding; the four leading paddings, < 4096
each, travel two to a float parameter), repeat and get_rows (a.ne = (K, R, A2, A3), b I32 (n, A2, A3) ->
(K, n, A2, A3), F32, I32 for I32 rows): one thread per dst element (grid-stride); set_rows (one thread per element
of b, float types, rows with an index outside a skipped)."""
from __future__ import annotations

from ....types import BF16, F16, F32, I32
from ..registry import register
from . import quant
from .common import C_TYPES, FLOATS, SUFFIX, elementwise_config, iparam32

COPY_PAIRS = tuple((s, d) for s in (F32, F16, BF16) for d in (F32, F16, BF16)) + ((I32, I32),)
TYPES = (F32, F16, BF16, I32)
MAX_PAD = 4096

_COPY = r"""
template <typename S, typename D, typename I> __device__ void copy_i(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I cs[4], cd[4];
        unravel(i, a.ne0, cs);
        unravel(i, a.ne, cd);
        *(D*)(a.dst + byte_offset(cd, a.nb)) = convert<D, S>(*(const S*)(a.src0 + byte_offset(cs, a.nb0)));
    }
}
template <typename S, typename D> __device__ void copy(const Args& a) { DISPATCH_I(a, copy_i, S, D); }
"""

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
"""


def copy_kernel_name(node) -> str:
    return f"copy_{SUFFIX[node.src[0].type]}_{SUFFIX[node.type]}"


def copy_refusal(node) -> str | None:
    a = node.src[0]
    if a.type.quantized or node.type.quantized:
        return quant.copy_refusal(node)
    if (a.type, node.type) not in COPY_PAIRS:
        return f"{node.op} on CUDA copies float types to float types and I32 to I32, not {a.type.name} -> {node.type.name}"
    if a.nelements != node.nelements:
        return f"{node.op}: the source has {a.nelements} elements, the destination {node.nelements}"
    return None


def copy_source() -> str:
    return _COPY + "".join(
        f'extern "C" __global__ void copy_{SUFFIX[s]}_{SUFFIX[d]}(const Args a) {{ copy<{C_TYPES[s]}, {C_TYPES[d]}>(a); }}\n'
        for s, d in COPY_PAIRS)


def kernel_name(node) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def refusal(node) -> str | None:
    a, b = node.src[0], node.src[1] if len(node.src) > 1 else None
    if a.type not in TYPES and not (node.op == "get_rows" and a.type.quantized):
        return f"{node.op} on CUDA takes F32, F16, BF16 or I32, not {a.type.name}"
    if node.op == "get_rows":
        ok = b is not None and b.type == I32 and node.type == (I32 if a.type == I32 else F32)
        return None if ok else "get_rows on CUDA takes I32 row indices"
    if node.op == "pad":
        if a.type == I32:
            return "pad on CUDA takes float types"
        if any(p >= MAX_PAD for p in node.op_params["lp"]):
            return f"pad on CUDA takes left paddings below {MAX_PAD}, got {node.op_params['lp']}"
        return None
    if node.type != a.type or (node.op == "concat" and b.type != a.type):
        return f"{node.op} on CUDA takes sources of one type and writes that type"
    return None


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


register(ops=("dup", "cont", "cpy", "cast"), source=copy_source, refusal=copy_refusal, kernel_name=copy_kernel_name,
         iparam=iparam32)
register(ops=("concat", "pad", "repeat", "get_rows"), source=source, refusal=refusal, kernel_name=kernel_name,
         params=params)



def set_rows_refusal(node) -> str | None:
    b, c = node.src[:2]
    if b.type not in FLOATS or node.type not in FLOATS or c.type != I32:
        return f"set_rows on CUDA writes float rows with I32 indices, not {b.type.name} rows into {node.type.name}"
    return None


def set_rows_source() -> str:
    return "".join(f'extern "C" __global__ void set_rows_{SUFFIX[s]}_{SUFFIX[d]}(const Args a) '
                   f'{{ set_rows_k<{C_TYPES[s]}, {C_TYPES[d]}>(a); }}\n' for s in FLOATS for d in FLOATS)


register(ops=("set_rows",), source=set_rows_source, refusal=set_rows_refusal,
         kernel_name=lambda node: f"set_rows_{SUFFIX[node.src[0].type]}_{SUFFIX[node.type]}",
         launch_config=lambda node: elementwise_config(node.src[0]))
