// flash_attn_ext for prompt chunks with heads of 64 on tensor cores (attention_fa_mma.cuh; kernels/attention_flash.py's tc):
// fa_mma_k per K and V type (F16, Q8_0).
#include "attention_fa_mma.cuh"

// at most 168 registers a thread: 3 blocks an SM
extern "C" {
__global__ void __launch_bounds__(128, 3) fa_mma_d64_f16_f16(const FaArgs a);
__global__ void __launch_bounds__(128, 3) fa_mma_d64_f16_q8_0(const FaArgs a);
__global__ void __launch_bounds__(128, 3) fa_mma_d64_q8_0_f16(const FaArgs a);
__global__ void __launch_bounds__(128, 3) fa_mma_d64_q8_0_q8_0(const FaArgs a);
}
extern "C" __global__ void fa_mma_d64_f16_f16(const FaArgs a) { grid_dependency(); fa_mma_k<64, half_t, half_t>(a); }
extern "C" __global__ void fa_mma_d64_f16_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<64, half_t, q8_0_t>(a); }
extern "C" __global__ void fa_mma_d64_q8_0_f16(const FaArgs a) { grid_dependency(); fa_mma_k<64, q8_0_t, half_t>(a); }
extern "C" __global__ void fa_mma_d64_q8_0_q8_0(const FaArgs a) { grid_dependency(); fa_mma_k<64, q8_0_t, q8_0_t>(a); }
