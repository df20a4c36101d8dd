// LayerNorm on F32 with its affine (and activation) fused: a block, a warp, or a warp with vector accesses per row.
#include "norm.cuh"

extern "C" __global__ void norm_affine_f32(const Args a) { grid_dependency(); norm_affine_row<float>(a); }
extern "C" __global__ void norm_affine_warp_f32(const Args a) { grid_dependency(); norm_affine_warp<float>(a); }
extern "C" __global__ void norm_affine_vec_f32(const Args a) { grid_dependency(); norm_affine_vec<float>(a); }
