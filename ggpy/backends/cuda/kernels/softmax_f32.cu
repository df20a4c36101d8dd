// soft_max (without a mask or with an F32, F16 or BF16 one; rows or warps) and diag_mask_inf on F32.
#include "softmax.cuh"

extern "C" __global__ void diag_mask_inf_f32(const Args a) { grid_dependency(); diag_mask_inf_k<float>(a); }
extern "C" __global__ void soft_max_f32(const Args a) { grid_dependency(); soft_max_row<float, float>(a); }
extern "C" __global__ void soft_max_warp_f32(const Args a) { grid_dependency(); soft_max_warp<float, float>(a); }
extern "C" __global__ void soft_max_f32_f32(const Args a) { grid_dependency(); soft_max_row<float, float>(a); }
extern "C" __global__ void soft_max_warp_f32_f32(const Args a) { grid_dependency(); soft_max_warp<float, float>(a); }
extern "C" __global__ void soft_max_f32_f16(const Args a) { grid_dependency(); soft_max_row<float, half_t>(a); }
extern "C" __global__ void soft_max_warp_f32_f16(const Args a) { grid_dependency(); soft_max_warp<float, half_t>(a); }
extern "C" __global__ void soft_max_f32_bf16(const Args a) { grid_dependency(); soft_max_row<float, bf16_t>(a); }
extern "C" __global__ void soft_max_warp_f32_bf16(const Args a) { grid_dependency(); soft_max_warp<float, bf16_t>(a); }
