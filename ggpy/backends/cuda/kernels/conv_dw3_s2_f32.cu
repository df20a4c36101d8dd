// conv_dw3_cwhn, the fast 3x3 CWHN depthwise conv, of stride 2 for F32 inputs (1 or 4 channels a thread).
#include "conv.cuh"

extern "C" __global__ void conv_dw3_cwhn_s2_v1_f32_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<float, float, float, 1, 2>(a); }
extern "C" __global__ void conv_dw3_cwhn_s2_v4_f32_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<float, float, float, 4, 2>(a); }
extern "C" __global__ void conv_dw3_cwhn_s2_v1_f16_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, float, float, 1, 2>(a); }
extern "C" __global__ void conv_dw3_cwhn_s2_v4_f16_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<half_t, float, float, 4, 2>(a); }
extern "C" __global__ void conv_dw3_cwhn_s2_v1_bf16_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, float, float, 1, 2>(a); }
extern "C" __global__ void conv_dw3_cwhn_s2_v4_bf16_f32_f32(const Args a) { grid_dependency(); conv_dw3_cwhn<bf16_t, float, float, 4, 2>(a); }
