"""Binary ops with ggml broadcasting (b repeats over a), the unary functions, sin, cos, scale, clamp and leaky_relu.

dst has a's ne; every source may have any strides. Math runs in float, F16 is converted on load and store.
Fast path (`_c_` kernels): when dst and the sources are contiguous, under 2^31 elements, and b's dims are one
block of a's (same shape, a row vector over ne[0], a per-channel vector over ne[2], ...), flat 32-bit indices
replace the per-element unravel (b's index is (i / inner) % b's elements). The others unravel in 32 bits
where the tensors fit (iparam32)."""
from __future__ import annotations

from ....optable import ACTIVATIONS
from ..registry import register
from .common import BLOCK, C_TYPES, FLOATS, MAX_BLOCKS, SUFFIX, iparam32

BINARY = {"add": "x + y", "sub": "x - y", "mul": "x * y", "div": "x / y"}
UNARY = {
    "sqr": "x * x", "sqrt": "sqrtf(x)", "log": "logf(x)", "exp": "expf(x)", "abs": "fabsf(x)", "neg": "-x",
    "sgn": "(x > 0.f) ? 1.f : ((x < 0.f) ? -1.f : 0.f)", "step": "(x > 0.f) ? 1.f : 0.f",
    "relu": "(x > 0.f) ? x : 0.f",
    "gelu": "0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))",
    "gelu_erf": "0.5f * x * (1.f + erff(x * 0.7071067811865476f))",
    "gelu_quick": "x / (1.f + expf(-1.702f * x))", "silu": "x / (1.f + expf(-x))",
    "sigmoid": "1.f / (1.f + expf(-x))", "tanh": "tanhf(x)", "elu": "(x > 0.f) ? x : expm1f(x)",
    "hardswish": "x * fminf(1.f, fmaxf(0.f, (x + 3.f) / 6.f))",
    "hardsigmoid": "fminf(1.f, fmaxf(0.f, (x + 3.f) / 6.f))",
    "softplus": "(x > 20.f) ? x : log1pf(expf(x))",
    "sin": "sinf(x)", "cos": "cosf(x)",
    "scale": "x * a.p0 + a.p1", "clamp": "fminf(fmaxf(x, a.p0), a.p1)", "leaky_relu": "(x > 0.f) ? x : x * a.p0",
}
PARAMS = {"scale": ("s", "b"), "clamp": ("min", "max"), "leaky_relu": ("slope",)}

_BINARY_TEMPLATE = r"""
template <typename TA, typename TB, typename I> __device__ void binary_i_%(op)s(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4], cb[4];
        unravel(i, a.ne, c);
        for (int k = 0; k < 4; ++k) cb[k] = c[k] %% (I)a.ne1[k];
        float x = to_f(*(const TA*)(a.src0 + byte_offset(c, a.nb0)));
        float y = to_f(*(const TB*)(a.src1 + byte_offset(cb, a.nb1)));
        *(TA*)(a.dst + byte_offset(c, a.nb)) = from_f<TA>(%(expr)s);
    }
}
template <typename TA, typename TB> __device__ void binary_%(op)s(const Args& a) { DISPATCH_I(a, binary_i_%(op)s, TA, TB); }
"""
# b's element of flat index i: i itself (same shape), else (i / inner) %% n1 with inner = a.iop (b's dims
# a block of a's: a row vector over ne[0] has inner 1, a per-channel vector over ne[2] inner ne[0] * ne[1])
_BINARY_FLAT_TEMPLATE = r"""
template <typename TA, typename TB> __device__ void binary_c_%(op)s(const Args& a) {
    const unsigned n = (unsigned)a.n, n1 = (unsigned)(a.ne1[0] * a.ne1[1] * a.ne1[2] * a.ne1[3]);
    const unsigned inner = (unsigned)a.iop;
    const TA* x0 = (const TA*)a.src0; const TB* y0 = (const TB*)a.src1; TA* d = (TA*)a.dst;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float x = to_f(x0[i]);
        float y = to_f(y0[n1 == n ? i : (inner > 1 ? i / inner : i) %% n1]);
        d[i] = from_f<TA>(%(expr)s);
    }
}
"""
# a.iop == 4: F32, n %% 4 == 0 and 16-byte aligned (iparam): float4 loads and stores; a.iop == 8: F16 / BF16,
# n %% 8 == 0 and 16-byte aligned: 8 elements per 16-byte load and store
_UNARY_FLAT_TEMPLATE = r"""
template <typename T> __device__ void unary_c_%(op)s(const Args& a) {
    const unsigned n = (unsigned)a.n;
    const T* x0 = (const T*)a.src0; T* d = (T*)a.dst;
    if (sizeof(T) == 2 && a.iop == 8) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 8; i += gridDim.x * blockDim.x) {
            uint4 v = ((const uint4*)x0)[i];
            T* e = (T*)&v;
            #pragma unroll
            for (int j = 0; j < 8; ++j) { const float x = to_f(e[j]); e[j] = from_f<T>(%(expr)s); }
            ((uint4*)d)[i] = v;
        }
        return;
    }
    if (sizeof(T) == 4 && a.iop == 4) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += gridDim.x * blockDim.x) {
            float4 v = ((const float4*)x0)[i];
            float x;
            x = v.x; v.x = %(expr)s;
            x = v.y; v.y = %(expr)s;
            x = v.z; v.z = %(expr)s;
            x = v.w; v.w = %(expr)s;
            ((float4*)d)[i] = v;
        }
        return;
    }
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float x = to_f(x0[i]);
        d[i] = from_f<T>(%(expr)s);
    }
}
"""
_UNARY_TEMPLATE = r"""
template <typename T, typename I> __device__ void unary_i_%(op)s(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        float x = to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(%(expr)s);
    }
}
template <typename T> __device__ void unary_%(op)s(const Args& a) { DISPATCH_I(a, unary_i_%(op)s, T); }
"""


def _inner(node) -> int | None:
    """For b of a binary op: the product of a's dims before b's first non-broadcast dim when b's dims are one
    block of a's (b.ne[k] == a.ne[k] for k in [k0, k1), 1 elsewhere), so b's flat index is (i / inner) % b's
    elements; None otherwise."""
    b = node.src[1]
    full = [k for k in range(4) if node.ne[k] > 1 and b.ne[k] == node.ne[k]]
    if any(b.ne[k] not in (1, node.ne[k]) for k in range(4)):
        return None
    if full and any(b.ne[k] == 1 and node.ne[k] > 1 for k in range(full[0], full[-1])):
        return None
    inner = 1
    for k in range(full[0] if full else 0):
        inner *= node.ne[k]
    return inner


def flat(node) -> bool:
    """Whether the node runs on flat 32-bit indices: everything contiguous, and b (binary ops) one block of
    a's dims (_inner: a row vector over ne[0], a per-channel vector over ne[2], same shape, ...)."""
    if node.nelements >= 1 << 31 or not node.is_contiguous():
        return False
    srcs = [s for s in node.src if s is not None]
    if not all(s.is_contiguous() for s in srcs) or srcs[0].ne != node.ne:
        return False
    return node.op not in BINARY or _inner(node) is not None


def _vec(node) -> int:
    """Elements per 16-byte access of a flat unary node whose elements come in 16-byte aligned groups (4 F32 or
    8 F16/BF16; needs its memory planned), else 1."""
    w = 16 // node.type.size
    if node.op in BINARY or node.nelements % w or not flat(node):
        return 1
    ts = [node, node.src[0]]
    if any(getattr(t.buffer, "tensor_ptr", None) is None for t in ts):
        return 1
    return w if all(t.buffer.tensor_ptr(t) % 16 == 0 for t in ts) else 1


def iparam(node) -> int:
    """Flat binary kernels: b's `inner` (see _inner); flat unary: the elements per 16-byte access (_vec; 0 for
    scalar access); the others: 32-bit index math where the tensors fit."""
    if not flat(node):
        return iparam32(node)
    if node.op in BINARY:
        return _inner(node)
    w = _vec(node)
    return w if w > 1 else 0


def launch_config(node):
    """The default grid-stride launch, over groups of 4 or 8 elements for vector unary kernels."""
    n = node.nelements // _vec(node)
    return min(MAX_BLOCKS, max(1, (n + BLOCK - 1) // BLOCK)), BLOCK


def kernel_name(node) -> str:
    c = "c_" if flat(node) else ""
    if node.op in BINARY:
        return f"{node.op}_{c}{SUFFIX[node.src[0].type]}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{c}{SUFFIX[node.type]}"


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 sources and writes the first one's type"
    return None


def params(node) -> tuple:
    return tuple(node.op_params[k] for k in PARAMS.get(node.op, ()))


def source() -> str:
    parts = []
    for op, expr in BINARY.items():
        parts.append(_BINARY_TEMPLATE % {"op": op, "expr": expr})
        parts.append(_BINARY_FLAT_TEMPLATE % {"op": op, "expr": expr})
        for ta in FLOATS:
            for tb in FLOATS:
                for c in ("", "c_"):
                    parts.append(f'extern "C" __global__ void {op}_{c}{SUFFIX[ta]}_{SUFFIX[tb]}(const Args a) '
                                 f'{{ binary_{c}{op}<{C_TYPES[ta]}, {C_TYPES[tb]}>(a); }}\n')
    for op, expr in UNARY.items():
        parts.append(_UNARY_TEMPLATE % {"op": op, "expr": expr})
        parts.append(_UNARY_FLAT_TEMPLATE % {"op": op, "expr": expr})
        for t in FLOATS:
            for c in ("", "c_"):
                parts.append(f'extern "C" __global__ void {op}_{c}{SUFFIX[t]}(const Args a) '
                             f'{{ unary_{c}{op}<{C_TYPES[t]}>(a); }}\n')
    return "".join(parts)


def epilogue_act_source() -> str:
    """epilogue_act(op, x): x through the activation with id `op` (0: none; the op table's ACTIVATIONS)."""
    cases = "".join(f"        case {i}: return {UNARY[act]};\n" for act, i in ACTIVATIONS.items())
    return ("#ifndef GGPY_EPILOGUE_ACT\n#define GGPY_EPILOGUE_ACT\n"
            "__device__ __forceinline__ float epilogue_act(int op, float x) {\n    switch (op) {\n" + cases
            + "        default: return x;\n    }\n}\n#endif\n")


register(ops=tuple(BINARY) + tuple(UNARY), source=source, refusal=refusal, kernel_name=kernel_name, params=params,
         iparam=iparam, launch_config=launch_config)
