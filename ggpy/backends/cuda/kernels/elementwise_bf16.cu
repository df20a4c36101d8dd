// The binary ops add, sub, mul, div of an BF16 a and a b of any float type, strided and flat (`_c_`).
#include "elementwise.cuh"

extern "C" __global__ void add_bf16_f32(const Args a) { grid_dependency(); binary<op_add, bf16_t, float>(a); }
extern "C" __global__ void add_c_bf16_f32(const Args a) { grid_dependency(); binary_c<op_add, bf16_t, float>(a); }
extern "C" __global__ void add_bf16_f16(const Args a) { grid_dependency(); binary<op_add, bf16_t, half_t>(a); }
extern "C" __global__ void add_c_bf16_f16(const Args a) { grid_dependency(); binary_c<op_add, bf16_t, half_t>(a); }
extern "C" __global__ void add_bf16_bf16(const Args a) { grid_dependency(); binary<op_add, bf16_t, bf16_t>(a); }
extern "C" __global__ void add_c_bf16_bf16(const Args a) { grid_dependency(); binary_c<op_add, bf16_t, bf16_t>(a); }
extern "C" __global__ void sub_bf16_f32(const Args a) { grid_dependency(); binary<op_sub, bf16_t, float>(a); }
extern "C" __global__ void sub_c_bf16_f32(const Args a) { grid_dependency(); binary_c<op_sub, bf16_t, float>(a); }
extern "C" __global__ void sub_bf16_f16(const Args a) { grid_dependency(); binary<op_sub, bf16_t, half_t>(a); }
extern "C" __global__ void sub_c_bf16_f16(const Args a) { grid_dependency(); binary_c<op_sub, bf16_t, half_t>(a); }
extern "C" __global__ void sub_bf16_bf16(const Args a) { grid_dependency(); binary<op_sub, bf16_t, bf16_t>(a); }
extern "C" __global__ void sub_c_bf16_bf16(const Args a) { grid_dependency(); binary_c<op_sub, bf16_t, bf16_t>(a); }
extern "C" __global__ void mul_bf16_f32(const Args a) { grid_dependency(); binary<op_mul, bf16_t, float>(a); }
extern "C" __global__ void mul_c_bf16_f32(const Args a) { grid_dependency(); binary_c<op_mul, bf16_t, float>(a); }
extern "C" __global__ void mul_bf16_f16(const Args a) { grid_dependency(); binary<op_mul, bf16_t, half_t>(a); }
extern "C" __global__ void mul_c_bf16_f16(const Args a) { grid_dependency(); binary_c<op_mul, bf16_t, half_t>(a); }
extern "C" __global__ void mul_bf16_bf16(const Args a) { grid_dependency(); binary<op_mul, bf16_t, bf16_t>(a); }
extern "C" __global__ void mul_c_bf16_bf16(const Args a) { grid_dependency(); binary_c<op_mul, bf16_t, bf16_t>(a); }
extern "C" __global__ void div_bf16_f32(const Args a) { grid_dependency(); binary<op_div, bf16_t, float>(a); }
extern "C" __global__ void div_c_bf16_f32(const Args a) { grid_dependency(); binary_c<op_div, bf16_t, float>(a); }
extern "C" __global__ void div_bf16_f16(const Args a) { grid_dependency(); binary<op_div, bf16_t, half_t>(a); }
extern "C" __global__ void div_c_bf16_f16(const Args a) { grid_dependency(); binary_c<op_div, bf16_t, half_t>(a); }
extern "C" __global__ void div_bf16_bf16(const Args a) { grid_dependency(); binary<op_div, bf16_t, bf16_t>(a); }
extern "C" __global__ void div_c_bf16_bf16(const Args a) { grid_dependency(); binary_c<op_div, bf16_t, bf16_t>(a); }
