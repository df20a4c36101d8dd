// Q4_1: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b, glu twins).
#include "quant_mmvq.cuh"

MMVQ_DECLARE(q4_1)

extern "C" __global__ void get_rows_q4_1(const Args a) { grid_dependency(); get_rows_q_k<dq_q4_1>(a); }
extern "C" __global__ void copy_q4_1_f32(const Args a) { grid_dependency(); dequantize_k<dq_q4_1, float>(a); }
extern "C" __global__ void mmv_q4_1_f32(const Args a) { grid_dependency(); mmv_k<dq_q4_1, float>(a); }
extern "C" __global__ void copy_q4_1_f16(const Args a) { grid_dependency(); dequantize_k<dq_q4_1, half_t>(a); }
extern "C" __global__ void mmv_q4_1_f16(const Args a) { grid_dependency(); mmv_k<dq_q4_1, half_t>(a); }
extern "C" __global__ void copy_q4_1_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q4_1, bf16_t>(a); }
extern "C" __global__ void mmv_q4_1_bf16(const Args a) { grid_dependency(); mmv_k<dq_q4_1, bf16_t>(a); }
extern "C" __global__ void mmvq_q4_1(const Args a) { mmvq_entry<mq_q4_1, false, false>(a); }
extern "C" __global__ void mmvq_glu_q4_1(const Args a) { mmvq_entry<mq_q4_1, true, false>(a); }
extern "C" __global__ void mmvq_s_q4_1(const Args a) { mmvq_entry<mq_q4_1, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q4_1(const Args a) { mmvq_entry<mq_q4_1, true, true>(a); }
extern "C" __global__ void mmvq_v_q4_1(const Args a) { mmvq_stream_entry<mq_q4_1, false>(a); }
extern "C" __global__ void mmvq_v_glu_q4_1(const Args a) { mmvq_stream_entry<mq_q4_1, true>(a); }
extern "C" __global__ void mmvq_b_q4_1(const Args a) { mmvq_batch_entry<mq_q4_1, false>(a); }
extern "C" __global__ void mmvq_b_glu_q4_1(const Args a) { mmvq_batch_entry<mq_q4_1, true>(a); }
