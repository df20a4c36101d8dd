// mul_mat's dot-product kernel (mmv) for a float a of any float type and a float b of few columns.
#include "quant.cuh"

extern "C" __global__ void mmv_f32_f32(const Args a) { mmv_k<dq_float<float>, float>(a); }
extern "C" __global__ void mmv_f32_f16(const Args a) { mmv_k<dq_float<float>, half_t>(a); }
extern "C" __global__ void mmv_f32_bf16(const Args a) { mmv_k<dq_float<float>, bf16_t>(a); }
extern "C" __global__ void mmv_f16_f32(const Args a) { mmv_k<dq_float<half_t>, float>(a); }
extern "C" __global__ void mmv_f16_f16(const Args a) { mmv_k<dq_float<half_t>, half_t>(a); }
extern "C" __global__ void mmv_f16_bf16(const Args a) { mmv_k<dq_float<half_t>, bf16_t>(a); }
extern "C" __global__ void mmv_bf16_f32(const Args a) { mmv_k<dq_float<bf16_t>, float>(a); }
extern "C" __global__ void mmv_bf16_f16(const Args a) { mmv_k<dq_float<bf16_t>, half_t>(a); }
extern "C" __global__ void mmv_bf16_bf16(const Args a) { mmv_k<dq_float<bf16_t>, bf16_t>(a); }
