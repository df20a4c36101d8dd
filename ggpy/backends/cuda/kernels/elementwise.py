"""Binary ops with ggml broadcasting (b repeats over a), the unary functions, scale, clamp and leaky_relu.

dst has a's ne; every source may have any strides. Math runs in float, F16 is converted on load and store.
"""
from __future__ import annotations

from ....ops.elementwise import UNARY_OPS
from ....types import F16, F32
from .common import C_TYPES, SUFFIX

FLOATS = (F32, F16)
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
    "scale": "x * a.p0 + a.p1", "clamp": "fminf(fmaxf(x, a.p0), a.p1)", "leaky_relu": "(x > 0.f) ? x : x * a.p0",
}
assert set(UNARY_OPS) <= set(UNARY)
PARAMS = {"scale": ("s", "b"), "clamp": ("min", "max"), "leaky_relu": ("slope",)}
OPS = tuple(BINARY) + tuple(UNARY)

_BINARY_TEMPLATE = r"""
template <typename TA, typename TB> __device__ void binary_%(op)s(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4], cb[4];
        unravel(i, a.ne, c);
        for (int k = 0; k < 4; ++k) cb[k] = c[k] %% a.ne1[k];
        float x = to_f(*(const TA*)(a.src0 + byte_offset(c, a.nb0)));
        float y = to_f(*(const TB*)(a.src1 + byte_offset(cb, a.nb1)));
        *(TA*)(a.dst + byte_offset(c, a.nb)) = from_f<TA>(%(expr)s);
    }
}
"""
_UNARY_TEMPLATE = r"""
template <typename T> __device__ void unary_%(op)s(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        float x = to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0)));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(%(expr)s);
    }
}
"""


def kernel_name(node) -> str:
    if node.op in BINARY:
        return f"{node.op}_{SUFFIX[node.src[0].type]}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{SUFFIX[node.type]}"


def supports(node) -> bool:
    if node.op not in OPS:
        return False
    srcs = [s for s in node.src if s is not None]
    n_src = 2 if node.op in BINARY else 1
    return len(srcs) == n_src and all(s.type in FLOATS for s in srcs) and node.type == srcs[0].type


def params(node) -> tuple:
    return tuple(node.op_params[k] for k in PARAMS.get(node.op, ()))


def source() -> str:
    parts = []
    for op, expr in BINARY.items():
        parts.append(_BINARY_TEMPLATE % {"op": op, "expr": expr})
        for ta in FLOATS:
            for tb in FLOATS:
                parts.append(f'extern "C" __global__ void {op}_{SUFFIX[ta]}_{SUFFIX[tb]}(const Args a) '
                             f'{{ binary_{op}<{C_TYPES[ta]}, {C_TYPES[tb]}>(a); }}\n')
    for op, expr in UNARY.items():
        parts.append(_UNARY_TEMPLATE % {"op": op, "expr": expr})
        for t in FLOATS:
            parts.append(f'extern "C" __global__ void {op}_{SUFFIX[t]}(const Args a) {{ unary_{op}<{C_TYPES[t]}>(a); }}\n')
    return "".join(parts)
