// The elementwise ops' math in float, one functor each: `op_<name>::f(x, p0, p1)` for the unary ones (p0, p1 the
// op's float parameters: scale, clamp, leaky_relu), `op_<name>::f(x, y)` for the binary ones (y broadcast as
// ggml's b). The elementwise kernels (elementwise.cu), the generated chain kernels (generated.py) and the fused
// epilogues' activation (epilogue_act) all compute them here, so fused and unfused graphs round alike. A result
// rounded to F16 / BF16 takes OpFor<Op, T>: the same op with cheaper math where its error is far below that
// rounding (gelu_erf's erf).
#pragma once

#define BINARY_OP(name, ...) \
    struct op_##name { static __device__ __forceinline__ float f(float x, float y) { return __VA_ARGS__; } };
#define UNARY_OP(name, ...) \
    struct op_##name { static __device__ __forceinline__ float f(float x, float p0, float p1) { return __VA_ARGS__; } };

BINARY_OP(add, x + y)
BINARY_OP(sub, x - y)
BINARY_OP(mul, x * y)
BINARY_OP(div, x / y)

UNARY_OP(sqr, x * x)
UNARY_OP(sqrt, sqrtf(x))
UNARY_OP(log, logf(x))
UNARY_OP(exp, expf(x))
UNARY_OP(abs, fabsf(x))
UNARY_OP(neg, -x)
UNARY_OP(sgn, (x > 0.f) ? 1.f : ((x < 0.f) ? -1.f : 0.f))
UNARY_OP(step, (x > 0.f) ? 1.f : 0.f)
UNARY_OP(relu, (x > 0.f) ? x : 0.f)
UNARY_OP(gelu, 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))))
UNARY_OP(gelu_erf, 0.5f * x * (1.f + erff(x * 0.7071067811865476f)))

// erf by Abramowitz and Stegun 7.1.26 (|error| < 2e-7 with the approximate exp: 1/1000 of an F16 rounding step at
// 1), a third of erff's instructions: a GELU pass in half precision is then bound by memory, not by erf
__device__ __forceinline__ float erf_half(float x) {
    const float z = fabsf(x), t = __frcp_rn(fmaf(0.3275911f, z, 1.f));
    const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
    return copysignf(1.f - p * __expf(-z * z), x);
}
UNARY_OP(gelu_erf_half, 0.5f * x * (1.f + erf_half(x * 0.7071067811865476f)))
UNARY_OP(gelu_quick, x / (1.f + expf(-1.702f * x)))
UNARY_OP(silu, x / (1.f + expf(-x)))
UNARY_OP(sigmoid, 1.f / (1.f + expf(-x)))
UNARY_OP(tanh, tanhf(x))
UNARY_OP(elu, (x > 0.f) ? x : expm1f(x))
UNARY_OP(hardswish, x * fminf(1.f, fmaxf(0.f, (x + 3.f) / 6.f)))
UNARY_OP(hardsigmoid, fminf(1.f, fmaxf(0.f, (x + 3.f) / 6.f)))
UNARY_OP(softplus, (x > 20.f) ? x : log1pf(expf(x)))
UNARY_OP(sin, sinf(x))
UNARY_OP(cos, cosf(x))
UNARY_OP(scale, x * p0 + p1)
UNARY_OP(clamp, fminf(fmaxf(x, p0), p1))
UNARY_OP(leaky_relu, (x > 0.f) ? x : x * p0)

// OpFor<Op, T>::op: the functor that computes Op for a result of type T
template <typename Op, typename T> struct OpFor { using op = Op; };
template <> struct OpFor<op_gelu_erf, half_t> { using op = op_gelu_erf_half; };
template <> struct OpFor<op_gelu_erf, bf16_t> { using op = op_gelu_erf_half; };

// x through the activation with id `op` (0: none) for a result of type D (OpFor): the op table's activation ids
// (Op.activation), passed by the compiler as -DGGPY_ACT_<NAME>=<id> (kernels/__init__.py's options)
template <typename D = float> __device__ __forceinline__ float epilogue_act(int op, float x) {
    if (op == 0) return x;
    switch (op) {
        case GGPY_ACT_GELU: return op_gelu::f(x, 0.f, 0.f);
        case GGPY_ACT_GELU_ERF: return OpFor<op_gelu_erf, D>::op::f(x, 0.f, 0.f);
        case GGPY_ACT_GELU_QUICK: return op_gelu_quick::f(x, 0.f, 0.f);
        case GGPY_ACT_RELU: return op_relu::f(x, 0.f, 0.f);
        case GGPY_ACT_SILU: return op_silu::f(x, 0.f, 0.f);
        case GGPY_ACT_SIGMOID: return op_sigmoid::f(x, 0.f, 0.f);
        case GGPY_ACT_TANH: return op_tanh::f(x, 0.f, 0.f);
        default: return x;
    }
}
