// LayerNorm on BF16 with its affine (and activation) fused: a block, a warp, or a warp with vector accesses per row.
#include "norm.cuh"

extern "C" __global__ void norm_affine_bf16(const Args a) { grid_dependency(); norm_affine_row<bf16_t>(a); }
extern "C" __global__ void norm_affine_warp_bf16(const Args a) { grid_dependency(); norm_affine_warp<bf16_t>(a); }
extern "C" __global__ void norm_affine_vec_bf16(const Args a) { grid_dependency(); norm_affine_vec<bf16_t>(a); }
