// conv_2d as an implicit GEMM (conv_2d_tiled): shared-memory tiles, no scratch.
#include "conv.cuh"

extern "C" __global__ void conv_2d_f32_f32(const Args a) { grid_dependency(); conv_2d_tiled<float, float>(a); }
extern "C" __global__ void conv_2d_f32_f16(const Args a) { grid_dependency(); conv_2d_tiled<float, half_t>(a); }
extern "C" __global__ void conv_2d_f32_bf16(const Args a) { grid_dependency(); conv_2d_tiled<float, bf16_t>(a); }
extern "C" __global__ void conv_2d_f16_f32(const Args a) { grid_dependency(); conv_2d_tiled<half_t, float>(a); }
extern "C" __global__ void conv_2d_f16_f16(const Args a) { grid_dependency(); conv_2d_tiled<half_t, half_t>(a); }
extern "C" __global__ void conv_2d_f16_bf16(const Args a) { grid_dependency(); conv_2d_tiled<half_t, bf16_t>(a); }
extern "C" __global__ void conv_2d_bf16_f32(const Args a) { grid_dependency(); conv_2d_tiled<bf16_t, float>(a); }
extern "C" __global__ void conv_2d_bf16_f16(const Args a) { grid_dependency(); conv_2d_tiled<bf16_t, half_t>(a); }
extern "C" __global__ void conv_2d_bf16_bf16(const Args a) { grid_dependency(); conv_2d_tiled<bf16_t, bf16_t>(a); }
