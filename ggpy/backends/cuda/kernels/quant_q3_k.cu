// Q3_K: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b,
// glu twins). A 110-byte 256-block: 32 bytes hmask, 64 bytes of 2-bit quants at 32, 12 bytes of 16 6-bit scales at 96,
// f16 d at 108. Value 128h + 32j + l (l < 32): bits 2j of byte 32 + 32h + l, minus 4 where bit 4h + j of hmask byte l
// is 0; group s = 8h + 2j + l / 16, d * (scale_s - 32) * q.
#include "quant_q23_k.cuh"

MMVQ_DECLARE(q3_k)

extern "C" __global__ void get_rows_q3_k(const Args a) { grid_dependency(); get_rows_q_k<dq_q3_k>(a); }
extern "C" __global__ void copy_q3_k_f32(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, float>(a); }
extern "C" __global__ void mmv_q3_k_f32(const Args a) { grid_dependency(); mmv_k<dq_q3_k, float>(a); }
extern "C" __global__ void copy_q3_k_f16(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, half_t>(a); }
extern "C" __global__ void mmv_q3_k_f16(const Args a) { grid_dependency(); mmv_k<dq_q3_k, half_t>(a); }
extern "C" __global__ void copy_q3_k_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q3_k, bf16_t>(a); }
extern "C" __global__ void mmv_q3_k_bf16(const Args a) { grid_dependency(); mmv_k<dq_q3_k, bf16_t>(a); }
extern "C" __global__ void mmvq_q3_k(const Args a) { mmvq_entry<mq_q3_k, false, false>(a); }
extern "C" __global__ void mmvq_glu_q3_k(const Args a) { mmvq_entry<mq_q3_k, true, false>(a); }
extern "C" __global__ void mmvq_s_q3_k(const Args a) { mmvq_entry<mq_q3_k, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q3_k(const Args a) { mmvq_entry<mq_q3_k, true, true>(a); }
extern "C" __global__ void mmvq_b_q3_k(const Args a) { mmvq_batch_entry<mq_q3_k, false>(a); }
extern "C" __global__ void mmvq_b_glu_q3_k(const Args a) { mmvq_batch_entry<mq_q3_k, true>(a); }
