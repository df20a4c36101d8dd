// LayerNorm on F16 with its affine (and activation) fused: a block, a warp, or a warp with vector accesses per row.
#include "norm.cuh"

extern "C" __global__ void norm_affine_f16(const Args a) { grid_dependency(); norm_affine_row<half_t>(a); }
extern "C" __global__ void norm_affine_warp_f16(const Args a) { grid_dependency(); norm_affine_warp<half_t>(a); }
extern "C" __global__ void norm_affine_vec_f16(const Args a) { grid_dependency(); norm_affine_vec<half_t>(a); }
