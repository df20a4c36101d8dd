// IQ4_XS: get_rows, the dequantizing copies into F32, F16, BF16, mul_mat's dot-product kernels (mmv; mmvq, mmvq_s, mmvq_b,
// glu twins). A 136-byte 256-block: f16 d, uint16 of the 8 sub-blocks' high scale bits (2 each) at 2, their low
// nibbles in the 4 bytes at 4, then 16 bytes of nibbles per sub-block of 32 at 8 (quant_iq4.cuh); value
// d * (scale - 32) * kvalues[nibble].
#include "quant_iq4.cuh"

MMVQ_DECLARE(iq4_xs)

extern "C" __global__ void get_rows_iq4_xs(const Args a) { grid_dependency(); get_rows_q_k<dq_iq4_xs>(a); }
extern "C" __global__ void copy_iq4_xs_f32(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, float>(a); }
extern "C" __global__ void mmv_iq4_xs_f32(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, float>(a); }
extern "C" __global__ void copy_iq4_xs_f16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, half_t>(a); }
extern "C" __global__ void mmv_iq4_xs_f16(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, half_t>(a); }
extern "C" __global__ void copy_iq4_xs_bf16(const Args a) { grid_dependency(); dequantize_k<dq_iq4_xs, bf16_t>(a); }
extern "C" __global__ void mmv_iq4_xs_bf16(const Args a) { grid_dependency(); mmv_k<dq_iq4_xs, bf16_t>(a); }
extern "C" __global__ void mmvq_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, false, false>(a); }
extern "C" __global__ void mmvq_glu_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, true, false>(a); }
extern "C" __global__ void mmvq_s_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, false, true>(a); }
extern "C" __global__ void mmvq_s_glu_iq4_xs(const Args a) { mmvq_entry<mq_iq4_xs, true, true>(a); }
extern "C" __global__ void mmvq_b_iq4_xs(const Args a) { mmvq_batch_entry<mq_iq4_xs, false>(a); }
extern "C" __global__ void mmvq_b_glu_iq4_xs(const Args a) { mmvq_batch_entry<mq_iq4_xs, true>(a); }
