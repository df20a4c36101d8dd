// conv_dw3_cwhn, the fast 3x3 CWHN depthwise conv, of stride 1 for F16 inputs (1 or 4 channels a thread).
#include "conv.cuh"

extern "C" __global__ void conv_dw3_cwhn_s1_v1_f32_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<float, half_t, float, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_f32_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<float, half_t, float, 4, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v1_f32_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<float, half_t, half_t, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_f32_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<float, half_t, half_t, 4, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v1_f16_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, half_t, float, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_f16_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, half_t, float, 4, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v1_f16_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, half_t, half_t, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_f16_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, half_t, half_t, 4, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v1_bf16_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, half_t, float, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_bf16_f16_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, half_t, float, 4, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v1_bf16_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, half_t, half_t, 1, 1>(a); }
extern "C" __global__ void conv_dw3_cwhn_s1_v4_bf16_f16_f16(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, half_t, half_t, 4, 1>(a); }
