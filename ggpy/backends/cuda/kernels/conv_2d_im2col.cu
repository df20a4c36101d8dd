// conv_2d's band im2col for cuBLASLt: positions first (im2col_pos) or channels first (im2col_cf).
#include "conv.cuh"

extern "C" __global__ void im2col_pos_f32_f32(const Args a) { grid_dependency(); im2col_pos<float, float>(a); }
extern "C" __global__ void im2col_cf_f32_f32(const Args a) { grid_dependency(); im2col_cf<float, float>(a); }
extern "C" __global__ void im2col_pos_f32_f16(const Args a) { grid_dependency(); im2col_pos<float, half_t>(a); }
extern "C" __global__ void im2col_cf_f32_f16(const Args a) { grid_dependency(); im2col_cf<float, half_t>(a); }
extern "C" __global__ void im2col_pos_f32_bf16(const Args a) { grid_dependency(); im2col_pos<float, bf16_t>(a); }
extern "C" __global__ void im2col_cf_f32_bf16(const Args a) { grid_dependency(); im2col_cf<float, bf16_t>(a); }
extern "C" __global__ void im2col_pos_f16_f32(const Args a) { grid_dependency(); im2col_pos<half_t, float>(a); }
extern "C" __global__ void im2col_cf_f16_f32(const Args a) { grid_dependency(); im2col_cf<half_t, float>(a); }
extern "C" __global__ void im2col_pos_f16_f16(const Args a) { grid_dependency(); im2col_pos<half_t, half_t>(a); }
extern "C" __global__ void im2col_cf_f16_f16(const Args a) { grid_dependency(); im2col_cf<half_t, half_t>(a); }
extern "C" __global__ void im2col_pos_f16_bf16(const Args a) { grid_dependency(); im2col_pos<half_t, bf16_t>(a); }
extern "C" __global__ void im2col_cf_f16_bf16(const Args a) { grid_dependency(); im2col_cf<half_t, bf16_t>(a); }
extern "C" __global__ void im2col_pos_bf16_f32(const Args a) { grid_dependency(); im2col_pos<bf16_t, float>(a); }
extern "C" __global__ void im2col_cf_bf16_f32(const Args a) { grid_dependency(); im2col_cf<bf16_t, float>(a); }
extern "C" __global__ void im2col_pos_bf16_f16(const Args a) { grid_dependency(); im2col_pos<bf16_t, half_t>(a); }
extern "C" __global__ void im2col_cf_bf16_f16(const Args a) { grid_dependency(); im2col_cf<bf16_t, half_t>(a); }
extern "C" __global__ void im2col_pos_bf16_bf16(const Args a) { grid_dependency(); im2col_pos<bf16_t, bf16_t>(a); }
extern "C" __global__ void im2col_cf_bf16_bf16(const Args a) { grid_dependency(); im2col_cf<bf16_t, bf16_t>(a); }
