// The elementwise ops' math in float, one functor each: `op_<name>::f(x, p0, p1)` for the unary ones (p0, p1 the
// op's float parameters: scale, clamp, leaky_relu), `op_<name>::f(x, y)` for the binary ones (y broadcast as
// ggml's b). The elementwise kernels (elementwise.cu), the generated chain kernels (generated.py) and the fused
// epilogues' activation (epilogue_act) all compute them here, so fused and unfused graphs round alike.
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

// x through the activation with id `op` (0: none): the op table's activation ids (Op.activation), passed by the
// compiler as -DGGPY_ACT_<NAME>=<id> (kernels/__init__.py's options)
__device__ __forceinline__ float epilogue_act(int op, float x) {
    switch (op) {
        case GGPY_ACT_GELU: return op_gelu::f(x, 0.f, 0.f);
        case GGPY_ACT_GELU_ERF: return op_gelu_erf::f(x, 0.f, 0.f);
        case GGPY_ACT_GELU_QUICK: return op_gelu_quick::f(x, 0.f, 0.f);
        case GGPY_ACT_RELU: return op_relu::f(x, 0.f, 0.f);
        case GGPY_ACT_SILU: return op_silu::f(x, 0.f, 0.f);
        case GGPY_ACT_SIGMOID: return op_sigmoid::f(x, 0.f, 0.f);
        case GGPY_ACT_TANH: return op_tanh::f(x, 0.f, 0.f);
        default: return x;
    }
}
