// norm, rms_norm (one block per row), group_norm (one block per (group, batch)), the fused add + rms_norm [+ mul by
// the weight] and rms_norm + mul.
#include "norm.cuh"

extern "C" __global__ void norm_f32(const Args a) { grid_dependency(); norm_row<float, false>(a); }
extern "C" __global__ void rms_norm_f32(const Args a) { grid_dependency(); norm_row<float, true>(a); }
extern "C" __global__ void group_norm_f32(const Args a) { grid_dependency(); group_norm_k<float>(a); }
extern "C" __global__ void norm_f16(const Args a) { grid_dependency(); norm_row<half_t, false>(a); }
extern "C" __global__ void rms_norm_f16(const Args a) { grid_dependency(); norm_row<half_t, true>(a); }
extern "C" __global__ void group_norm_f16(const Args a) { grid_dependency(); group_norm_k<half_t>(a); }
extern "C" __global__ void norm_bf16(const Args a) { grid_dependency(); norm_row<bf16_t, false>(a); }
extern "C" __global__ void rms_norm_bf16(const Args a) { grid_dependency(); norm_row<bf16_t, true>(a); }
extern "C" __global__ void group_norm_bf16(const Args a) { grid_dependency(); group_norm_k<bf16_t>(a); }
extern "C" __global__ void add_rms_norm_f32(const Args a) { grid_dependency(); add_rms_norm_row<false>(a, nullptr); }
extern "C" __global__ void add_rms_norm_mul_f32(const WeightArgs p) { grid_dependency(); add_rms_norm_row<true>(p.a, (const float*)p.w); }
extern "C" __global__ void rms_norm_mul_f32(const WeightArgs p) { grid_dependency(); rms_norm_mul_row<float>(p.a, (const float*)p.w); }
extern "C" __global__ void rms_norm_mul_f16(const WeightArgs p) { grid_dependency(); rms_norm_mul_row<half_t>(p.a, (const half_t*)p.w); }
extern "C" __global__ void rms_norm_mul_bf16(const WeightArgs p) { grid_dependency(); rms_norm_mul_row<bf16_t>(p.a, (const bf16_t*)p.w); }
