"""soft_max (mask F32/F16 broadcast over dims 2 and 3, scale, ALiBi slopes; one block per row, short rows one warp
per row) and diag_mask_inf (grid-stride); F32 and F16, sources with any strides. The softmax of windowed
attention is fused into win_attn (attention.py)."""
from __future__ import annotations

from ..registry import register
from .common import C_TYPES, FLOATS, SUFFIX, row_launch, rows

SOFT_MAX_WARP_MAX = 32 * 8          # rows up to this long run one warp per row (soft_max_warp)
SOFT_MAX_WARP_BLOCK = 128

_SOURCE = r"""
#define X(i) to_f(*(const T*)(x + (i) * a.nb0[0]))
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

// a[..., i1, i0] = -inf where i0 > n_past + i1; p0: n_past
template <typename T> __device__ void diag_mask_inf_k(const Args& a) {
    const i64 n_past = (i64)a.p0;
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        float v = c[0] > n_past + c[1] ? __int_as_float(0xff800000) : to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
#undef X
"""



def _warp(node) -> bool:
    """Whether soft_max runs one warp per row: short rows, 32-bit row offsets within the tensors."""
    if node.op != "soft_max" or node.src[0].ne[0] > SOFT_MAX_WARP_MAX:
        return False
    ts = [t for t in (node, node.src[0], node.src[1] if len(node.src) > 1 else None) if t is not None]
    return all(abs(nb) * n < 1 << 31 for t in ts for n, nb in zip(t.ne, t.nb))


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 with a result of the same type"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node) -> str:
    t = SUFFIX[node.src[0].type]
    if node.op == "diag_mask_inf":
        return f"diag_mask_inf_{t}"
    op = "soft_max_warp" if _warp(node) else "soft_max"
    if len(node.src) > 1 and node.src[1] is not None:
        return f"{op}_{t}_{SUFFIX[node.src[1].type]}"
    return f"{op}_{t}"


def params(node) -> tuple:
    if node.op == "diag_mask_inf":
        return (node.op_params["n_past"],)
    return node.op_params["scale"], node.op_params["max_bias"]


def launch_config(node):
    """soft_max: one block per row (threads by row length), short rows a warp each; diag_mask_inf grid-stride."""
    if node.op == "diag_mask_inf":
        return None
    if _warp(node):
        return -(-rows(node) // (SOFT_MAX_WARP_BLOCK // 32)), SOFT_MAX_WARP_BLOCK
    return row_launch(node)


def source() -> str:
    parts = [_SOURCE]
    for t in FLOATS:
        c, s = C_TYPES[t], SUFFIX[t]
        parts.append(f'extern "C" __global__ void diag_mask_inf_{s}(const Args a) {{ diag_mask_inf_k<{c}>(a); }}\n')
        parts.append(f'extern "C" __global__ void soft_max_{s}(const Args a) {{ soft_max_row<{c}, float>(a); }}\n')
        parts.append(f'extern "C" __global__ void soft_max_warp_{s}(const Args a) {{ soft_max_warp<{c}, float>(a); }}\n')
        for m in FLOATS:
            parts.append(f'extern "C" __global__ void soft_max_{s}_{SUFFIX[m]}(const Args a) '
                         f'{{ soft_max_row<{c}, {C_TYPES[m]}>(a); }}\n')
            parts.append(f'extern "C" __global__ void soft_max_warp_{s}_{SUFFIX[m]}(const Args a) '
                         f'{{ soft_max_warp<{c}, {C_TYPES[m]}>(a); }}\n')
    return "".join(parts)


register(ops=("soft_max", "diag_mask_inf"), source=source, refusal=refusal, kernel_name=kernel_name, params=params,
         launch_config=launch_config)
