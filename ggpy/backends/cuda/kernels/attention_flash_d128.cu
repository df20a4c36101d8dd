// flash_attn_ext for heads of 128 (kernels/attention_flash.py): fa_vec_k per (query pairs per block, K and V of one
// type), without and with (_cl) clusters, and fa_combine_k.
#include "attention_flash.cuh"

extern "C" __global__ void FA_VEC2 fa_vec_d128_r1_f32_f32(const FaArgs a) { fa_vec_k<128, 128, 1, 1, float, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r1_f16_f16(const FaArgs a) { fa_vec_k<128, 128, 1, 1, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r1_q8_0_q8_0(const FaArgs a) { fa_vec_k<128, 128, 1, 1, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r2_f32_f32(const FaArgs a) { fa_vec_k<128, 128, 2, 1, float, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r2_f16_f16(const FaArgs a) { fa_vec_k<128, 128, 2, 1, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r2_q8_0_q8_0(const FaArgs a) { fa_vec_k<128, 128, 2, 1, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r4_f32_f32(const FaArgs a) { fa_vec_k<128, 128, 4, 1, float, float>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r4_f16_f16(const FaArgs a) { fa_vec_k<128, 128, 4, 1, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC2 fa_vec_d128_r4_q8_0_q8_0(const FaArgs a) { fa_vec_k<128, 128, 4, 1, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d128_r8_f32_f32(const FaArgs a) { fa_vec_k<128, 128, 8, 1, float, float>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d128_r8_f16_f16(const FaArgs a) { fa_vec_k<128, 128, 8, 1, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC1 fa_vec_d128_r8_q8_0_q8_0(const FaArgs a) { fa_vec_k<128, 128, 8, 1, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r1_f32_f32_cl(const FaArgs a) { fa_vec_k<128, 128, 1, FA_CL, float, float>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r1_f16_f16_cl(const FaArgs a) { fa_vec_k<128, 128, 1, FA_CL, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r1_q8_0_q8_0_cl(const FaArgs a) { fa_vec_k<128, 128, 1, FA_CL, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r2_f32_f32_cl(const FaArgs a) { fa_vec_k<128, 128, 2, FA_CL, float, float>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r2_f16_f16_cl(const FaArgs a) { fa_vec_k<128, 128, 2, FA_CL, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r2_q8_0_q8_0_cl(const FaArgs a) { fa_vec_k<128, 128, 2, FA_CL, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r4_f32_f32_cl(const FaArgs a) { fa_vec_k<128, 128, 4, FA_CL, float, float>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r4_f16_f16_cl(const FaArgs a) { fa_vec_k<128, 128, 4, FA_CL, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r4_q8_0_q8_0_cl(const FaArgs a) { fa_vec_k<128, 128, 4, FA_CL, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r8_f32_f32_cl(const FaArgs a) { fa_vec_k<128, 128, 8, FA_CL, float, float>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r8_f16_f16_cl(const FaArgs a) { fa_vec_k<128, 128, 8, FA_CL, half_t, half_t>(a); }
extern "C" __global__ void FA_VEC_CL fa_vec_d128_r8_q8_0_q8_0_cl(const FaArgs a) { fa_vec_k<128, 128, 8, FA_CL, q8_0_t, q8_0_t>(a); }
extern "C" __global__ void fa_combine_d128(const FaArgs a) { grid_dependency(); fa_combine_k<128>(a); }
