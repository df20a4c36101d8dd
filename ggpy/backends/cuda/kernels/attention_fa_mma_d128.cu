// flash_attn_ext for prompt chunks with heads of 128 on tensor cores (attention_fa_mma.cuh; kernels/attention_flash.py's tc):
// fa_mma_k per K and V type (F16, Q8_0).
#include "attention_fa_mma.cuh"

extern "C" __global__ void fa_mma_d128_f16_f16(const FaArgs a) { grid_dependency(); fa_mma_k<128, half_t, half_t>(a); }
extern "C" __global__ void fa_mma_d128_f16_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<128, half_t, q8_0_t>(a); }
extern "C" __global__ void fa_mma_d128_q8_0_f16(const FaArgs a) { grid_dependency(); fa_mma_k<128, q8_0_t, half_t>(a); }
extern "C" __global__ void fa_mma_d128_q8_0_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<128, q8_0_t, q8_0_t>(a); }
