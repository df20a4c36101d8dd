// The quantizing copies: F32 into Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (a warp per 32-block), and mmvq's F32 b into its
// q8_1 temp block.
#include "quant_mmvq.cuh"

extern "C" __global__ void copy_f32_q4_0(const Args a) { grid_dependency(); quantize_k<4, true, 18>(a); }
extern "C" __global__ void copy_f32_q4_1(const Args a) { grid_dependency(); quantize_k<4, false, 20>(a); }
extern "C" __global__ void copy_f32_q5_0(const Args a) { grid_dependency(); quantize_k<5, true, 22>(a); }
extern "C" __global__ void copy_f32_q5_1(const Args a) { grid_dependency(); quantize_k<5, false, 24>(a); }
extern "C" __global__ void copy_f32_q8_0(const Args a) { grid_dependency(); quantize_k<8, true, 34>(a); }
extern "C" __global__ void quantize_q8_1_f32(const Args a) { grid_dependency(); quantize_q8_1_k(a); }
