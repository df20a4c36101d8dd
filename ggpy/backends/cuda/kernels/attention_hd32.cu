// win_attn for heads of 32 on CUDA cores (F32 math; 1, 4 or 16 lanes a query).
#include "attention.cuh"

extern "C" __global__ void win_attn_s1_hd32_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 1, float, float, float>(a); }
extern "C" __global__ void win_attn_s4_hd32_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 4, float, float, float>(a); }
extern "C" __global__ void win_attn_s16_hd32_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 16, float, float, float>(a); }
extern "C" __global__ void win_attn_s1_hd32_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 1, half_t, float, float>(a); }
extern "C" __global__ void win_attn_s4_hd32_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 4, half_t, float, float>(a); }
extern "C" __global__ void win_attn_s16_hd32_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<32, 16, half_t, float, float>(a); }
