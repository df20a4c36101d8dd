// mul_mat's dot-product kernel (mmv) for an F16 a and a float b of few columns.
#include "quant.cuh"

extern "C" __global__ void mmv_f16_f32(const Args a) { grid_dependency(); mmv_k<dq_float<half_t>, float>(a); }
extern "C" __global__ void mmv_f16_f16(const Args a) { grid_dependency(); mmv_k<dq_float<half_t>, half_t>(a); }
extern "C" __global__ void mmv_f16_bf16(const Args a) { grid_dependency(); mmv_k<dq_float<half_t>, bf16_t>(a); }
