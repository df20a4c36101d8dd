"""sum_rows, mean (one block per row), sum (one block) and argmax (one block per row, the first index of the
largest value); F32 and F16 sources with any strides, sums in double."""
from __future__ import annotations

from ....types import I32
from ..registry import register
from .common import C_TYPES, FLOATS, SUFFIX, row_launch, rows


_SOURCE = r"""
#define X(i) to_f(*(const T*)(x + (i) * a.nb0[0]))
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



def refusal(node) -> str | None:
    x = node.src[0]
    out = I32 if node.op == "argmax" else x.type
    if x.type not in FLOATS or node.type != out:
        return f"{node.op} on CUDA takes an F32/F16 source; got {x.type.name} -> {node.type.name}"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def launch_config(node) -> tuple:
    """One block per row (one block in all for sum); threads by row length."""
    if node.op == "sum":
        return 1, 1024
    return row_launch(node)


def source() -> str:
    parts = [_SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        for name, body in (("sum_rows", f"sum_row<{c}, false>"), ("mean", f"sum_row<{c}, true>"),
                           ("sum", f"sum_all<{c}>"), ("argmax", f"argmax_row<{c}>")):
            parts.append(f'extern "C" __global__ void {name}_{s}(const Args a) {{ {body}(a); }}\n')
    return "".join(parts)


register(ops=("sum", "sum_rows", "mean", "argmax"), source=source, refusal=refusal, kernel_name=kernel_name,
         launch_config=launch_config)
