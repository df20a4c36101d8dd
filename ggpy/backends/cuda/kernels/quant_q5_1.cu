// Q5_1: get_rows, the dequantizing copies into F32, F16, BF16 and mul_mat's dot-product kernel (mmv).
#include "quant.cuh"

extern "C" __global__ void get_rows_q5_1(const Args a) { get_rows_q_k<dq_q5_1>(a); }
extern "C" __global__ void copy_q5_1_f32(const Args a) { dequantize_k<dq_q5_1, float>(a); }
extern "C" __global__ void mmv_q5_1_f32(const Args a) { mmv_k<dq_q5_1, float>(a); }
extern "C" __global__ void copy_q5_1_f16(const Args a) { dequantize_k<dq_q5_1, half_t>(a); }
extern "C" __global__ void mmv_q5_1_f16(const Args a) { mmv_k<dq_q5_1, half_t>(a); }
extern "C" __global__ void copy_q5_1_bf16(const Args a) { dequantize_k<dq_q5_1, bf16_t>(a); }
extern "C" __global__ void mmv_q5_1_bf16(const Args a) { mmv_k<dq_q5_1, bf16_t>(a); }
