// win_attn for heads of 16 on tensor cores (F16 / BF16 q, k, v).
#include "attention.cuh"

extern "C" __global__ void win_attn_tc_hd16_f32_f16_f32(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, float, half_t, float>(a); }
extern "C" __global__ void win_attn_tc_hd16_f32_f16_f16(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, float, half_t, half_t>(a); }
extern "C" __global__ void win_attn_tc_hd16_f32_bf16_f32(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, float, bf16_t, float>(a); }
extern "C" __global__ void win_attn_tc_hd16_f32_bf16_bf16(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, float, bf16_t, bf16_t>(a); }
extern "C" __global__ void win_attn_tc_hd16_f16_f16_f32(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, half_t, half_t, float>(a); }
extern "C" __global__ void win_attn_tc_hd16_f16_f16_f16(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, half_t, half_t, half_t>(a); }
extern "C" __global__ void win_attn_tc_hd16_f16_bf16_f32(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, half_t, bf16_t, float>(a); }
extern "C" __global__ void win_attn_tc_hd16_f16_bf16_bf16(const AttnArgs a) { grid_dependency(); win_attn_tc_k<16, half_t, bf16_t, bf16_t>(a); }
