// conv_2d_dw one thread per output (WHCN dst, and CWHN dst walked channels first): where conv_dw3_cwhn does not apply.
#include "conv.cuh"

extern "C" __global__ void conv_2d_dw_f32_f32(const Args a) { grid_dependency(); conv_dw<float, float, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f32_f32(const Args a) { grid_dependency(); conv_dw<float, float, true>(a); }
extern "C" __global__ void conv_2d_dw_f32_f16(const Args a) { grid_dependency(); conv_dw<float, half_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f32_f16(const Args a) { grid_dependency(); conv_dw<float, half_t, true>(a); }
extern "C" __global__ void conv_2d_dw_f32_bf16(const Args a) { grid_dependency(); conv_dw<float, bf16_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f32_bf16(const Args a) { grid_dependency(); conv_dw<float, bf16_t, true>(a); }
extern "C" __global__ void conv_2d_dw_f16_f32(const Args a) { grid_dependency(); conv_dw<half_t, float, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f16_f32(const Args a) { grid_dependency(); conv_dw<half_t, float, true>(a); }
extern "C" __global__ void conv_2d_dw_f16_f16(const Args a) { grid_dependency(); conv_dw<half_t, half_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f16_f16(const Args a) { grid_dependency(); conv_dw<half_t, half_t, true>(a); }
extern "C" __global__ void conv_2d_dw_f16_bf16(const Args a) { grid_dependency(); conv_dw<half_t, bf16_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_f16_bf16(const Args a) { grid_dependency(); conv_dw<half_t, bf16_t, true>(a); }
extern "C" __global__ void conv_2d_dw_bf16_f32(const Args a) { grid_dependency(); conv_dw<bf16_t, float, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_bf16_f32(const Args a) { grid_dependency(); conv_dw<bf16_t, float, true>(a); }
extern "C" __global__ void conv_2d_dw_bf16_f16(const Args a) { grid_dependency(); conv_dw<bf16_t, half_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_bf16_f16(const Args a) { grid_dependency(); conv_dw<bf16_t, half_t, true>(a); }
extern "C" __global__ void conv_2d_dw_bf16_bf16(const Args a) { grid_dependency(); conv_dw<bf16_t, bf16_t, false>(a); }
extern "C" __global__ void conv_2d_dw_cwhn_bf16_bf16(const Args a) { grid_dependency(); conv_dw<bf16_t, bf16_t, true>(a); }
