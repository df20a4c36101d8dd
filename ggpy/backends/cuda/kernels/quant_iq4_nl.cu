// IQ4_NL: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b,
// glu twins). An 18-byte 32-block: f16 d, 16 bytes of nibbles (quant_iq4.cuh); value d * kvalues[nibble].
#include "quant_iq4.cuh"

MMVQ_DECLARE(iq4_nl)

extern "C" __global__ void get_rows_iq4_nl(const Args a) { grid_dependency(); get_rows_q_k<dq_iq4_nl>(a); }
extern "C" __global__ void copy_iq4_nl_f32(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, float>(a); }
extern "C" __global__ void mmv_iq4_nl_f32(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, float>(a); }
extern "C" __global__ void copy_iq4_nl_f16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, half_t>(a); }
extern "C" __global__ void mmv_iq4_nl_f16(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, half_t>(a); }
extern "C" __global__ void copy_iq4_nl_bf16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_nl, bf16_t>(a); }
extern "C" __global__ void mmv_iq4_nl_bf16(const Args a) { grid_dependency(); mmv_k<dq_iq4_nl, bf16_t>(a); }
extern "C" __global__ void mmvq_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, false, false>(a); }
extern "C" __global__ void mmvq_glu_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, true, false>(a); }
extern "C" __global__ void mmvq_s_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_iq4_nl(const Args a) { mmvq_entry<mq_iq4_nl, true, true>(a); }
extern "C" __global__ void mmvq_b_iq4_nl(const Args a) { mmvq_batch_entry<mq_iq4_nl, false>(a); }
extern "C" __global__ void mmvq_b_glu_iq4_nl(const Args a) { mmvq_batch_entry<mq_iq4_nl, true>(a); }
