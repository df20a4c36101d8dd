// conv_2d_direct (conv_2d of a shallow reduction) for BF16 inputs: dst F32 or a fused epilogue's type.
#include "conv.cuh"

extern "C" __global__ void conv_2d_direct_f32_bf16_f32(const Args a) { grid_dependency(); conv_2d_direct<float, bf16_t, float>(a); }
extern "C" __global__ void conv_2d_direct_f32_bf16_bf16(const Args a) { grid_dependency(); conv_2d_direct<float, bf16_t, bf16_t>(a); }
extern "C" __global__ void conv_2d_direct_f16_bf16_f32(const Args a) { grid_dependency(); conv_2d_direct<half_t, bf16_t, float>(a); }
extern "C" __global__ void conv_2d_direct_f16_bf16_f16(const Args a) { grid_dependency(); conv_2d_direct<half_t, bf16_t, half_t>(a); }
extern "C" __global__ void conv_2d_direct_f16_bf16_bf16(const Args a) { grid_dependency(); conv_2d_direct<half_t, bf16_t, bf16_t>(a); }
extern "C" __global__ void conv_2d_direct_bf16_bf16_f32(const Args a) { grid_dependency(); conv_2d_direct<bf16_t, bf16_t, float>(a); }
extern "C" __global__ void conv_2d_direct_bf16_bf16_bf16(const Args a) { grid_dependency(); conv_2d_direct<bf16_t, bf16_t, bf16_t>(a); }
