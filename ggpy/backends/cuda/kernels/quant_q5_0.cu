// Q5_0: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b, glu twins).
#include "quant_mmvq.cuh"

MMVQ_DECLARE(q5_0)

extern "C" __global__ void get_rows_q5_0(const Args a) { grid_dependency(); get_rows_q_k<dq_q5_0>(a); }
extern "C" __global__ void copy_q5_0_f32(const Args a) { grid_dependency(); dequantize_k<dq_q5_0, float>(a); }
extern "C" __global__ void mmv_q5_0_f32(const Args a) { grid_dependency(); mmv_k<dq_q5_0, float>(a); }
extern "C" __global__ void copy_q5_0_f16(const Args a) { grid_dependency(); dequantize_k<dq_q5_0, half_t>(a); }
extern "C" __global__ void mmv_q5_0_f16(const Args a) { grid_dependency(); mmv_k<dq_q5_0, half_t>(a); }
extern "C" __global__ void copy_q5_0_bf16(const Args a) { grid_dependency(); dequantize_k<dq_q5_0, bf16_t>(a); }
extern "C" __global__ void mmv_q5_0_bf16(const Args a) { grid_dependency(); mmv_k<dq_q5_0, bf16_t>(a); }
extern "C" __global__ void mmvq_q5_0(const Args a) { mmvq_entry<mq_q5_0, false, false>(a); }
extern "C" __global__ void mmvq_glu_q5_0(const Args a) { mmvq_entry<mq_q5_0, true, false>(a); }
extern "C" __global__ void mmvq_s_q5_0(const Args a) { mmvq_entry<mq_q5_0, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_q5_0(const Args a) { mmvq_entry<mq_q5_0, true, true>(a); }
extern "C" __global__ void mmvq_v_q5_0(const Args a) { mmvq_stream_entry<mq_q5_0, false>(a); }
extern "C" __global__ void mmvq_v_glu_q5_0(const Args a) { mmvq_stream_entry<mq_q5_0, true>(a); }
extern "C" __global__ void mmvq_b_q5_0(const Args a) { mmvq_batch_entry<mq_q5_0, false>(a); }
extern "C" __global__ void mmvq_b_glu_q5_0(const Args a) { mmvq_batch_entry<mq_q5_0, true>(a); }
