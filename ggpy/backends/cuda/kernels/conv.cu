// im2col (1-D, 2-D), conv_1d and conv_transpose_2d: one thread per output element.
#include "conv.cuh"

extern "C" __global__ void im2col_1d_f32_f32(const Args a) { grid_dependency(); im2col<float, float, false>(a); }
extern "C" __global__ void im2col_2d_f32_f32(const Args a) { grid_dependency(); im2col<float, float, true>(a); }
extern "C" __global__ void im2col_1d_f32_f16(const Args a) { grid_dependency(); im2col<float, half_t, false>(a); }
extern "C" __global__ void im2col_2d_f32_f16(const Args a) { grid_dependency(); im2col<float, half_t, true>(a); }
extern "C" __global__ void im2col_1d_f32_bf16(const Args a) { grid_dependency(); im2col<float, bf16_t, false>(a); }
extern "C" __global__ void im2col_2d_f32_bf16(const Args a) { grid_dependency(); im2col<float, bf16_t, true>(a); }
extern "C" __global__ void im2col_1d_f16_f32(const Args a) { grid_dependency(); im2col<half_t, float, false>(a); }
extern "C" __global__ void im2col_2d_f16_f32(const Args a) { grid_dependency(); im2col<half_t, float, true>(a); }
extern "C" __global__ void im2col_1d_f16_f16(const Args a) { grid_dependency(); im2col<half_t, half_t, false>(a); }
extern "C" __global__ void im2col_2d_f16_f16(const Args a) { grid_dependency(); im2col<half_t, half_t, true>(a); }
extern "C" __global__ void im2col_1d_f16_bf16(const Args a) { grid_dependency(); im2col<half_t, bf16_t, false>(a); }
extern "C" __global__ void im2col_2d_f16_bf16(const Args a) { grid_dependency(); im2col<half_t, bf16_t, true>(a); }
extern "C" __global__ void im2col_1d_bf16_f32(const Args a) { grid_dependency(); im2col<bf16_t, float, false>(a); }
extern "C" __global__ void im2col_2d_bf16_f32(const Args a) { grid_dependency(); im2col<bf16_t, float, true>(a); }
extern "C" __global__ void im2col_1d_bf16_f16(const Args a) { grid_dependency(); im2col<bf16_t, half_t, false>(a); }
extern "C" __global__ void im2col_2d_bf16_f16(const Args a) { grid_dependency(); im2col<bf16_t, half_t, true>(a); }
extern "C" __global__ void im2col_1d_bf16_bf16(const Args a) { grid_dependency(); im2col<bf16_t, bf16_t, false>(a); }
extern "C" __global__ void im2col_2d_bf16_bf16(const Args a) { grid_dependency(); im2col<bf16_t, bf16_t, true>(a); }
extern "C" __global__ void conv_1d_f32_f32(const Args a) { grid_dependency(); conv_1d<float, float>(a); }
extern "C" __global__ void conv_transpose_2d_f32_f32(const Args a) { grid_dependency(); conv_transpose<float, float>(a); }
extern "C" __global__ void conv_1d_f32_f16(const Args a) { grid_dependency(); conv_1d<float, half_t>(a); }
extern "C" __global__ void conv_transpose_2d_f32_f16(const Args a) { grid_dependency(); conv_transpose<float, half_t>(a); }
extern "C" __global__ void conv_1d_f32_bf16(const Args a) { grid_dependency(); conv_1d<float, bf16_t>(a); }
extern "C" __global__ void conv_transpose_2d_f32_bf16(const Args a) { grid_dependency(); conv_transpose<float, bf16_t>(a); }
extern "C" __global__ void conv_1d_f16_f32(const Args a) { grid_dependency(); conv_1d<half_t, float>(a); }
extern "C" __global__ void conv_transpose_2d_f16_f32(const Args a) { grid_dependency(); conv_transpose<half_t, float>(a); }
extern "C" __global__ void conv_1d_f16_f16(const Args a) { grid_dependency(); conv_1d<half_t, half_t>(a); }
extern "C" __global__ void conv_transpose_2d_f16_f16(const Args a) { grid_dependency(); conv_transpose<half_t, half_t>(a); }
extern "C" __global__ void conv_1d_f16_bf16(const Args a) { grid_dependency(); conv_1d<half_t, bf16_t>(a); }
extern "C" __global__ void conv_transpose_2d_f16_bf16(const Args a) { grid_dependency(); conv_transpose<half_t, bf16_t>(a); }
extern "C" __global__ void conv_1d_bf16_f32(const Args a) { grid_dependency(); conv_1d<bf16_t, float>(a); }
extern "C" __global__ void conv_transpose_2d_bf16_f32(const Args a) { grid_dependency(); conv_transpose<bf16_t, float>(a); }
extern "C" __global__ void conv_1d_bf16_f16(const Args a) { grid_dependency(); conv_1d<bf16_t, half_t>(a); }
extern "C" __global__ void conv_transpose_2d_bf16_f16(const Args a) { grid_dependency(); conv_transpose<bf16_t, half_t>(a); }
extern "C" __global__ void conv_1d_bf16_bf16(const Args a) { grid_dependency(); conv_1d<bf16_t, bf16_t>(a); }
extern "C" __global__ void conv_transpose_2d_bf16_bf16(const Args a) { grid_dependency(); conv_transpose<bf16_t, bf16_t>(a); }
