// win_attn for heads of 64 on CUDA cores (F32 math; 1, 4 or 16 lanes a query).
#include "attention.cuh"

extern "C" __global__ void win_attn_s1_hd64_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 1, float, float, float>(a); }
extern "C" __global__ void win_attn_s4_hd64_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 4, float, float, float>(a); }
extern "C" __global__ void win_attn_s16_hd64_f32_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 16, float, float, float>(a); }
extern "C" __global__ void win_attn_s1_hd64_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 1, half_t, float, float>(a); }
extern "C" __global__ void win_attn_s4_hd64_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 4, half_t, float, float>(a); }
extern "C" __global__ void win_attn_s16_hd64_f16_f32_f32(const AttnArgs a) { grid_dependency(); win_attn_k<64, 16, half_t, float, float>(a); }
