"""rope (ggml_rope_ext): one thread per pair of a row (normal (2j, 2j+1), NEOX (j, j + n_dims/2)), threads past the
rotated pairs copy two values; the angle and its cos/sin in double as the CPU's; F32, F16, BF16, any strides. It
may run in place: a thread reads its pair before writing it, and no two threads share a value."""
from __future__ import annotations

import struct

from ....ops.rope import yarn_corr_dims, yarn_mscale
from ....types import F32, I32
from ..registry import register
from .common import BLOCK, C_TYPES, FLOATS, MAX_BLOCKS, SUFFIX, tensor_ptr

_SOURCE = r"""
// a.src1: I32 positions (ne1[0] of them), a.src2: F32 frequency factors or null; p0: freq_base, p1: freq_scale;
// iop: NEOX pairs; ip: n_dims, then the float bits of ext_factor, mscale and YaRN's corr dims low, high
template <typename T> __device__ void rope_k(const Args& a) {
    const int n_dims = a.ip[0], half = n_dims / 2;
    const float ext = __int_as_float(a.ip[1]), mscale = __int_as_float(a.ip[2]);
    const float low = __int_as_float(a.ip[3]), high = __int_as_float(a.ip[4]);
    const i64 units = (a.ne[0] + 1) / 2, n = units * a.ne[1] * a.ne[2] * a.ne[3];
    for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (i64)gridDim.x * blockDim.x) {
        const i64 j = u % units;
        i64 r = u / units, c[4];
        c[0] = 0; c[1] = r % a.ne[1]; r /= a.ne[1]; c[2] = r % a.ne[2]; c[3] = r / a.ne[2];
        const char* x = a.src0 + byte_offset(c, a.nb0);
        char* y = a.dst + byte_offset(c, a.nb);
        if (j >= half) {
            for (i64 k = 2 * j; k < 2 * j + 2 && k < a.ne[0]; ++k) *(T*)(y + k * a.nb[0]) = *(const T*)(x + k * a.nb0[0]);
            continue;
        }
        double extrap = (double)*(const int*)(a.src1 + c[2] * a.nb1[0]) * pow((double)a.p0, -2.0 * j / n_dims);
        if (a.src2) extrap /= ((const float*)a.src2)[j];
        double theta = extrap * a.p1;
        if (ext != 0.f) {
            const double mix = ext * (1.0 - fmin(1.0, fmax(0.0, (j - low) / fmax(0.001, (double)high - low))));
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        double s, co;
        sincos(theta, &s, &co);
        const float cs = (float)co * mscale, sn = (float)s * mscale;
        const i64 k0 = a.iop ? j : 2 * j, k1 = a.iop ? j + half : 2 * j + 1;
        const float x0 = to_f(*(const T*)(x + k0 * a.nb0[0])), x1 = to_f(*(const T*)(x + k1 * a.nb0[0]));
        *(T*)(y + k0 * a.nb[0]) = from_f<T>(x0 * cs - x1 * sn);
        *(T*)(y + k1 * a.nb[0]) = from_f<T>(x0 * sn + x1 * cs);
    }
}
"""


def _bits(v: float) -> int:
    """The float32 bits of v as a signed int (Args.ip)."""
    return struct.unpack("<i", struct.pack("<f", v))[0]


def refusal(node) -> str | None:
    a, b = node.src[:2]
    c = node.src[2] if len(node.src) > 2 else None
    if a.type not in FLOATS or node.type != a.type or b.type != I32 or (c is not None and c.type != F32):
        return "rope on CUDA takes F32/F16/BF16 a (result of its type), I32 positions and F32 frequency factors"
    return None


def rope_steps(backend, node) -> list:
    """One grid-stride launch over the pairs, the frequency factors' address as Args.src2."""
    p = node.op_params
    low, high = yarn_corr_dims(p)
    srcs = [(tensor_ptr(s), s) for s in node.src]
    units = (node.ne[0] + 1) // 2 * node.ne[1] * node.ne[2] * node.ne[3]
    ints = (p["n_dims"], _bits(p["ext_factor"]), _bits(yarn_mscale(p)), _bits(low), _bits(high))
    return [backend.launch(node, f"rope_{SUFFIX[node.type]}", tensor_ptr(node), node, srcs,
                           (p["freq_base"], p["freq_scale"]), (min(MAX_BLOCKS, -(-units // BLOCK)), BLOCK),
                           int(p["mode"] == 2), ints)]


def source() -> str:
    return _SOURCE + "".join(f'extern "C" __global__ void rope_{SUFFIX[t]}(const Args a) {{ rope_k<{C_TYPES[t]}>(a); }}\n'
                             for t in FLOATS)


register(ops=("rope",), source=source, refusal=refusal, kernel_name=lambda node: f"rope_{SUFFIX[node.type]}",
         steps=rope_steps)
