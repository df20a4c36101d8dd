// Q2_K: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b,
// glu twins). An 84-byte 256-block: 16 scale bytes (4-bit scale, 4-bit min above it), one per 16 values; 64 bytes of 2-bit
// quants; f16 d at 80, dmin at 82. Value 128h + 32j + l (l < 32): bits 2j of byte 16 + 32h + l, group 8h + 2j + l / 16,
// d * scale * q - dmin * min.
#include "quant_q23_k.cuh"

MMVQ_DECLARE(q2_k)

extern "C" __global__ void get_rows_q2_k(const Args a) { grid_dependency(); get_rows_q_k<dq_q2_k>(a); }
extern "C" __global__ void copy_q2_k_f32(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, float>(a); }
extern "C" __global__ void mmv_q2_k_f32(const Args a) { grid_dependency(); mmv_k<dq_q2_k, float>(a); }
extern "C" __global__ void copy_q2_k_f16(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, half_t>(a); }
extern "C" __global__ void mmv_q2_k_f16(const Args a) { grid_dependency(); mmv_k<dq_q2_k, half_t>(a); }
extern "C" __global__ void copy_q2_k_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q2_k, bf16_t>(a); }
extern "C" __global__ void mmv_q2_k_bf16(const Args a) { grid_dependency(); mmv_k<dq_q2_k, bf16_t>(a); }
extern "C" __global__ void mmvq_q2_k(const Args a) { mmvq_entry<mq_q2_k, false, false>(a); }
extern "C" __global__ void mmvq_glu_q2_k(const Args a) { mmvq_entry<mq_q2_k, true, false>(a); }
extern "C" __global__ void mmvq_s_q2_k(const Args a) { mmvq_entry<mq_q2_k, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q2_k(const Args a) { mmvq_entry<mq_q2_k, true, true>(a); }
extern "C" __global__ void mmvq_b_q2_k(const Args a) { mmvq_batch_entry<mq_q2_k, false>(a); }
extern "C" __global__ void mmvq_b_glu_q2_k(const Args a) { mmvq_batch_entry<mq_q2_k, true>(a); }
