// flash_attn_ext for a generated token on tensor cores (attention_fa_dec.cuh; kernels/attention_flash.py's dec):
// fa_dec_k for heads of 64, F16 K and V.
#include "attention_fa_dec.cuh"

// two blocks an SM (at most 128 registers a thread). Heads of 128 stay on fa_vec_k: their step's fragments (64
// registers) and accumulators (64) leave one block an SM, slower than fa_vec_k (H200, 4096 keys: 20.8 against 15.7 us)
// _cl: a cluster of FA_CL chunks, _cl16 of 16 (non-portable: modules.py allows it; sm_90 on)
#define FA_DEC2 __launch_bounds__(FA_DEC_WARPS * 32, 2)
#if __CUDA_ARCH__ >= 900
#define FA_DEC_CL __cluster_dims__(FA_CL, 1, 1) FA_DEC2
#define FA_DEC_CL16 __cluster_dims__(16, 1, 1) FA_DEC2
#else
#define FA_DEC_CL FA_DEC2
#define FA_DEC_CL16 FA_DEC2
#endif
extern "C" __global__ void FA_DEC2 fa_dec_d64_f16_f16(const FaArgs a) { fa_dec_k<64, 1>(a); }
extern "C" __global__ void FA_DEC_CL fa_dec_d64_f16_f16_cl(const FaArgs a) { fa_dec_k<64, FA_CL>(a); }
extern "C" __global__ void FA_DEC_CL16 fa_dec_d64_f16_f16_cl16(const FaArgs a) { fa_dec_k<64, 16>(a); }
