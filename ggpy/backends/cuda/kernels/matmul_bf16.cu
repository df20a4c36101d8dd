// mul_mat's dot-product kernel (mmv) for an BF16 a and a float b of few columns.
#include "quant.cuh"

extern "C" __global__ void mmv_bf16_f32(const Args a) { grid_dependency(); mmv_k<dq_float<bf16_t>, float>(a); }
extern "C" __global__ void mmv_bf16_f16(const Args a) { grid_dependency(); mmv_k<dq_float<bf16_t>, half_t>(a); }
extern "C" __global__ void mmv_bf16_bf16(const Args a) { grid_dependency(); mmv_k<dq_float<bf16_t>, bf16_t>(a); }
