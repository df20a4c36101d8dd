// mul_mat's dot-product kernel (mmv) for an F32 a and a float b of few columns.
#include "quant.cuh"

extern "C" __global__ void mmv_f32_f32(const Args a) { grid_dependency(); mmv_k<dq_float<float>, float>(a); }
extern "C" __global__ void mmv_f32_f16(const Args a) { grid_dependency(); mmv_k<dq_float<float>, half_t>(a); }
extern "C" __global__ void mmv_f32_bf16(const Args a) { grid_dependency(); mmv_k<dq_float<float>, bf16_t>(a); }
