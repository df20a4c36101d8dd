// flash_attn_ext for prompt chunks with heads of 256 on tensor cores (attention_fa_mma.cuh; kernels/attention_flash.py's tc):
// fa_mma_k per K and V type (F16, Q8_0), tiles of 32 keys (K, V and the mask's tile in 38 KB of static shared
// memory; a warp's 16 x 256 accumulator takes 128 registers a thread).
#include "attention_fa_mma.cuh"

extern "C" __global__ void fa_mma_d256_f16_f16(const FaArgs a) { grid_dependency(); fa_mma_k<256, half_t, half_t, 32>(a); }
extern "C" __global__ void fa_mma_d256_f16_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<256, half_t, q8_0_t, 32>(a); }
extern "C" __global__ void fa_mma_d256_q8_0_f16(const FaArgs a) { grid_dependency(); fa_mma_k<256, q8_0_t, half_t, 32>(a); }
extern "C" __global__ void fa_mma_d256_q8_0_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<256, q8_0_t, q8_0_t, 32>(a); }
