// soft_max (without a mask or with an F32, F16 or BF16 one; rows or warps) and diag_mask_inf on F16.
#include "softmax.cuh"

extern "C" __global__ void diag_mask_inf_f16(const Args a) { grid_dependency(); diag_mask_inf_k<half_t>(a); }
extern "C" __global__ void soft_max_f16(const Args a) { grid_dependency(); soft_max_row<half_t, float>(a); }
extern "C" __global__ void soft_max_warp_f16(const Args a) { grid_dependency(); soft_max_warp<half_t, float>(a); }
extern "C" __global__ void soft_max_f16_f32(const Args a) { grid_dependency(); soft_max_row<half_t, float>(a); }
extern "C" __global__ void soft_max_warp_f16_f32(const Args a) { grid_dependency(); soft_max_warp<half_t, float>(a); }
extern "C" __global__ void soft_max_f16_f16(const Args a) { grid_dependency(); soft_max_row<half_t, half_t>(a); }
extern "C" __global__ void soft_max_warp_f16_f16(const Args a) { grid_dependency(); soft_max_warp<half_t, half_t>(a); }
extern "C" __global__ void soft_max_f16_bf16(const Args a) { grid_dependency(); soft_max_row<half_t, bf16_t>(a); }
extern "C" __global__ void soft_max_warp_f16_bf16(const Args a) { grid_dependency(); soft_max_warp<half_t, bf16_t>(a); }
