// Q6_K: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b, glu twins).
#include "quant_mmvq.cuh"

MMVQ_DECLARE(q6_k)

extern "C" __global__ void get_rows_q6_k(const Args a) { grid_dependency(); get_rows_q_k<dq_q6_k>(a); }
extern "C" __global__ void copy_q6_k_f32(const Args a) { grid_dependency(); dequantize_k<dq_q6_k, float>(a); }
extern "C" __global__ void mmv_q6_k_f32(const Args a) { grid_dependency(); mmv_k<dq_q6_k, float>(a); }
extern "C" __global__ void copy_q6_k_f16(const Args a) { grid_dependency(); dequantize_k<dq_q6_k, half_t>(a); }
extern "C" __global__ void mmv_q6_k_f16(const Args a) { grid_dependency(); mmv_k<dq_q6_k, half_t>(a); }
extern "C" __global__ void copy_q6_k_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q6_k, bf16_t>(a); }
extern "C" __global__ void mmv_q6_k_bf16(const Args a) { grid_dependency(); mmv_k<dq_q6_k, bf16_t>(a); }
extern "C" __global__ void mmvq_q6_k(const Args a) { mmvq_entry<mq_q6_k, false, false>(a); }
extern "C" __global__ void mmvq_glu_q6_k(const Args a) { mmvq_entry<mq_q6_k, true, false>(a); }
extern "C" __global__ void mmvq_s_q6_k(const Args a) { mmvq_entry<mq_q6_k, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q6_k(const Args a) { mmvq_entry<mq_q6_k, true, true>(a); }
extern "C" __global__ void mmvq_v_q6_k(const Args a) { mmvq_stream_entry<mq_q6_k, false>(a); }
extern "C" __global__ void mmvq_v_glu_q6_k(const Args a) { mmvq_stream_entry<mq_q6_k, true>(a); }
extern "C" __global__ void mmvq_b_q6_k(const Args a) { mmvq_batch_entry<mq_q6_k, false>(a); }
extern "C" __global__ void mmvq_b_glu_q6_k(const Args a) { mmvq_batch_entry<mq_q6_k, true>(a); }
