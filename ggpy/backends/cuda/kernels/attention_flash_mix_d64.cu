// flash_attn_ext for heads of 64 with K and V of two types (kernels/attention_flash.py): fa_vec_k per (query pairs
// per block, K type, V type).
#include "attention_flash.cuh"

extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_f32_f16(const FaArgs a) { fa_vec_k<64, 64, 1, 1, float, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_f32_q8_0(const FaArgs a) { fa_vec_k<64, 64, 1, 1, float, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_f16_f32(const FaArgs a) { fa_vec_k<64, 64, 1, 1, half_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_f16_q8_0(const FaArgs a) { fa_vec_k<64, 64, 1, 1, half_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_q8_0_f32(const FaArgs a) { fa_vec_k<64, 64, 1, 1, q8_0_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r1_q8_0_f16(const FaArgs a) { fa_vec_k<64, 64, 1, 1, q8_0_t, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_f32_f16(const FaArgs a) { fa_vec_k<64, 64, 2, 1, float, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_f32_q8_0(const FaArgs a) { fa_vec_k<64, 64, 2, 1, float, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_f16_f32(const FaArgs a) { fa_vec_k<64, 64, 2, 1, half_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_f16_q8_0(const FaArgs a) { fa_vec_k<64, 64, 2, 1, half_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_q8_0_f32(const FaArgs a) { fa_vec_k<64, 64, 2, 1, q8_0_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r2_q8_0_f16(const FaArgs a) { fa_vec_k<64, 64, 2, 1, q8_0_t, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_f32_f16(const FaArgs a) { fa_vec_k<64, 64, 4, 1, float, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_f32_q8_0(const FaArgs a) { fa_vec_k<64, 64, 4, 1, float, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_f16_f32(const FaArgs a) { fa_vec_k<64, 64, 4, 1, half_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_f16_q8_0(const FaArgs a) { fa_vec_k<64, 64, 4, 1, half_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_q8_0_f32(const FaArgs a) { fa_vec_k<64, 64, 4, 1, q8_0_t, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d64_r4_q8_0_f16(const FaArgs a) { fa_vec_k<64, 64, 4, 1, q8_0_t, half_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_f32_f16(const FaArgs a) { fa_vec_k<64, 64, 8, 1, float, half_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_f32_q8_0(const FaArgs a) { fa_vec_k<64, 64, 8, 1, float, q8_0_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_f16_f32(const FaArgs a) { fa_vec_k<64, 64, 8, 1, half_t, float>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_f16_q8_0(const FaArgs a) { fa_vec_k<64, 64, 8, 1, half_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_q8_0_f32(const FaArgs a) { fa_vec_k<64, 64, 8, 1, q8_0_t, float>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d64_r8_q8_0_f16(const FaArgs a) { fa_vec_k<64, 64, 8, 1, q8_0_t, half_t>(a); }
