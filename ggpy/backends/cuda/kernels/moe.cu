// mul_mat_id (kernels/moe.py): dst F32 (M, U, T) = for every slot (e, t) of ids (I32 (U, T), src2; its byte strides
// a.ip[1], a.ip[2]), row m of expert x = ids[e, t] of src0 (K, M, n_expert; a.ip[0] = n_expert) times column
// (e % B1, t) of b (K, B1, T). blockIdx.x the slot e + U t, blockIdx.y a block of rows, a warp a row: only the chosen
// experts' rows are read. A slot whose expert is outside [0, n_expert) gets zeros.
//   mmv_id_<as>:  exact, F32 accumulation (dq_<type>::at8 of quant.cuh; b F32 at src1);
//   mmvq_id_<as>: integer dot products (mmvq_rows of quant_mmvq.cuh) with b's columns as q8_1 at src1 (the temp block
//                 quantize_q8_1_f32 wrote: column c = e % B1 + B1 t).
#include "quant_iq4.cuh"
#include "quant_q23_k.cuh"

#define MOE_WARPS 4

struct MoeSlot {
    i64 e, t, m, expert;
    bool valid;
    __device__ MoeSlot(const Args& a) {
        const i64 U = a.ne[1];
        e = blockIdx.x % U; t = blockIdx.x / U;
        m = (i64)blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
        expert = *(const int*)(a.src2 + e * a.ip[1] + t * a.ip[2]);
        valid = expert >= 0 && expert < a.ip[0];
    }
    __device__ float* out(const Args& a) const { return (float*)(a.dst + m * a.nb[0] + e * a.nb[1] + t * a.nb[2]); }
};

template <typename Q> __device__ void mmv_id_k(const Args& a) {
    const MoeSlot s(a);
    const int lane = threadIdx.x & 31;
    if (s.m >= a.ne0[1]) return;
    if (!s.valid) { if (lane == 0) *s.out(a) = 0.f; return; }
    const char* row = a.src0 + s.expert * a.nb0[2] + s.m * a.nb0[1];
    const char* col = a.src1 + (s.e % a.ne1[1]) * a.nb1[1] + s.t * a.nb1[2];
    float acc = 0.f;
    #pragma unroll 4
    for (int c = lane; c < (int)(a.ne0[0] >> 3); c += 32) {
        float w[8];
        Q::at8(row, a.nb0[0], c, w);
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc += w[j] * *(const float*)(col + (i64)(8 * c + j) * a.nb1[0]);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) *s.out(a) = acc;
}

template <typename Q> __device__ void mmvq_id_k(const Args& a) {
    const MoeSlot s(a);
    const int K = (int)a.ne0[0];
    const int rows = s.m < a.ne0[1] && s.valid ? 1 : 0;
    const i64 c = s.e % a.ne1[1] + a.ne1[1] * s.t, C = a.ne1[1] * a.ne1[2];
    const signed char* xq = (const signed char*)a.src1 + c * K;
    const float2* xds = (const float2*)(a.src1 + C * K) + c * (K >> 5);
    const char* row = a.src0 + (s.valid ? s.expert : 0) * a.nb0[2] + s.m * a.nb0[1];
    mmvq_rows<Q, false, 2, 1, 1>(row, nullptr, a.nb0[1], rows, xq, xds, K, 1, []() {},
                                 [&](int, int, float v, float) { if ((threadIdx.x & 31) == 0) *s.out(a) = v; });
    if (s.m < a.ne0[1] && !s.valid && (threadIdx.x & 31) == 0) *s.out(a) = 0.f;
}

extern "C" __global__ void mmv_id_f32(const Args a) { grid_dependency(); mmv_id_k<dq_float<float> >(a); }
extern "C" __global__ void mmv_id_f16(const Args a) { grid_dependency(); mmv_id_k<dq_float<half_t> >(a); }
extern "C" __global__ void mmv_id_bf16(const Args a) { grid_dependency(); mmv_id_k<dq_float<bf16_t> >(a); }
extern "C" __global__ void mmv_id_q4_0(const Args a) { grid_dependency(); mmv_id_k<dq_q4_0>(a); }
extern "C" __global__ void mmvq_id_q4_0(const Args a) { grid_dependency(); mmvq_id_k<mq_q4_0>(a); }
extern "C" __global__ void mmv_id_q4_1(const Args a) { grid_dependency(); mmv_id_k<dq_q4_1>(a); }
extern "C" __global__ void mmvq_id_q4_1(const Args a) { grid_dependency(); mmvq_id_k<mq_q4_1>(a); }
extern "C" __global__ void mmv_id_q5_0(const Args a) { grid_dependency(); mmv_id_k<dq_q5_0>(a); }
extern "C" __global__ void mmvq_id_q5_0(const Args a) { grid_dependency(); mmvq_id_k<mq_q5_0>(a); }
extern "C" __global__ void mmv_id_q5_1(const Args a) { grid_dependency(); mmv_id_k<dq_q5_1>(a); }
extern "C" __global__ void mmvq_id_q5_1(const Args a) { grid_dependency(); mmvq_id_k<mq_q5_1>(a); }
extern "C" __global__ void mmv_id_q8_0(const Args a) { grid_dependency(); mmv_id_k<dq_q8_0>(a); }
extern "C" __global__ void mmvq_id_q8_0(const Args a) { grid_dependency(); mmvq_id_k<mq_q8_0>(a); }
extern "C" __global__ void mmv_id_q4_k(const Args a) { grid_dependency(); mmv_id_k<dq_q4_k>(a); }
extern "C" __global__ void mmvq_id_q4_k(const Args a) { grid_dependency(); mmvq_id_k<mq_q4_k>(a); }
extern "C" __global__ void mmv_id_q5_k(const Args a) { grid_dependency(); mmv_id_k<dq_q5_k>(a); }
extern "C" __global__ void mmvq_id_q5_k(const Args a) { grid_dependency(); mmvq_id_k<mq_q5_k>(a); }
extern "C" __global__ void mmv_id_q6_k(const Args a) { grid_dependency(); mmv_id_k<dq_q6_k>(a); }
extern "C" __global__ void mmvq_id_q6_k(const Args a) { grid_dependency(); mmvq_id_k<mq_q6_k>(a); }
extern "C" __global__ void mmv_id_q2_k(const Args a) { grid_dependency(); mmv_id_k<dq_q2_k>(a); }
extern "C" __global__ void mmvq_id_q2_k(const Args a) { grid_dependency(); mmvq_id_k<mq_q2_k>(a); }
extern "C" __global__ void mmv_id_q3_k(const Args a) { grid_dependency(); mmv_id_k<dq_q3_k>(a); }
extern "C" __global__ void mmvq_id_q3_k(const Args a) { grid_dependency(); mmvq_id_k<mq_q3_k>(a); }
extern "C" __global__ void mmv_id_iq4_nl(const Args a) { grid_dependency(); mmv_id_k<dq_iq4_nl>(a); }
extern "C" __global__ void mmvq_id_iq4_nl(const Args a) { grid_dependency(); mmvq_id_k<mq_iq4_nl>(a); }
extern "C" __global__ void mmv_id_iq4_xs(const Args a) { grid_dependency(); mmv_id_k<dq_iq4_xs>(a); }
extern "C" __global__ void mmvq_id_iq4_xs(const Args a) { grid_dependency(); mmvq_id_k<mq_iq4_xs>(a); }
