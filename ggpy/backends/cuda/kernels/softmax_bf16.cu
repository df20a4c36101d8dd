// soft_max (without a mask or with an F32, F16 or BF16 one; rows or warps) and diag_mask_inf on BF16.
#include "softmax.cuh"

extern "C" __global__ void diag_mask_inf_bf16(const Args a) { grid_dependency(); diag_mask_inf_k<bf16_t>(a); }
extern "C" __global__ void soft_max_bf16(const Args a) { grid_dependency(); soft_max_row<bf16_t, float>(a); }
extern "C" __global__ void soft_max_warp_bf16(const Args a) { grid_dependency(); soft_max_warp<bf16_t, float>(a); }
extern "C" __global__ void soft_max_bf16_f32(const Args a) { grid_dependency(); soft_max_row<bf16_t, float>(a); }
extern "C" __global__ void soft_max_warp_bf16_f32(const Args a) { grid_dependency(); soft_max_warp<bf16_t, float>(a); }
extern "C" __global__ void soft_max_bf16_f16(const Args a) { grid_dependency(); soft_max_row<bf16_t, half_t>(a); }
extern "C" __global__ void soft_max_warp_bf16_f16(const Args a) { grid_dependency(); soft_max_warp<bf16_t, half_t>(a); }
extern "C" __global__ void soft_max_bf16_bf16(const Args a) { grid_dependency(); soft_max_row<bf16_t, bf16_t>(a); }
extern "C" __global__ void soft_max_warp_bf16_bf16(const Args a) { grid_dependency(); soft_max_warp<bf16_t, bf16_t>(a); }
