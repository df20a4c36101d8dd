// The binary ops add, sub, mul, div of an F16 a and a b of any float type, strided and flat (`_c_`).
#include "elementwise.cuh"

extern "C" __global__ void add_f16_f32(const Args a) { grid_dependency(); binary<op_add, half_t, float>(a); }
extern "C" __global__ void add_c_f16_f32(const Args a) { grid_dependency(); binary_c<op_add, half_t, float>(a); }
extern "C" __global__ void add_f16_f16(const Args a) { grid_dependency(); binary<op_add, half_t, half_t>(a); }
extern "C" __global__ void add_c_f16_f16(const Args a) { grid_dependency(); binary_c<op_add, half_t, half_t>(a); }
extern "C" __global__ void add_f16_bf16(const Args a) { grid_dependency(); binary<op_add, half_t, bf16_t>(a); }
extern "C" __global__ void add_c_f16_bf16(const Args a) { grid_dependency(); binary_c<op_add, half_t, bf16_t>(a); }
extern "C" __global__ void sub_f16_f32(const Args a) { grid_dependency(); binary<op_sub, half_t, float>(a); }
extern "C" __global__ void sub_c_f16_f32(const Args a) { grid_dependency(); binary_c<op_sub, half_t, float>(a); }
extern "C" __global__ void sub_f16_f16(const Args a) { grid_dependency(); binary<op_sub, half_t, half_t>(a); }
extern "C" __global__ void sub_c_f16_f16(const Args a) { grid_dependency(); binary_c<op_sub, half_t, half_t>(a); }
extern "C" __global__ void sub_f16_bf16(const Args a) { grid_dependency(); binary<op_sub, half_t, bf16_t>(a); }
extern "C" __global__ void sub_c_f16_bf16(const Args a) { grid_dependency(); binary_c<op_sub, half_t, bf16_t>(a); }
extern "C" __global__ void mul_f16_f32(const Args a) { grid_dependency(); binary<op_mul, half_t, float>(a); }
extern "C" __global__ void mul_c_f16_f32(const Args a) { grid_dependency(); binary_c<op_mul, half_t, float>(a); }
extern "C" __global__ void mul_f16_f16(const Args a) { grid_dependency(); binary<op_mul, half_t, half_t>(a); }
extern "C" __global__ void mul_c_f16_f16(const Args a) { grid_dependency(); binary_c<op_mul, half_t, half_t>(a); }
extern "C" __global__ void mul_f16_bf16(const Args a) { grid_dependency(); binary<op_mul, half_t, bf16_t>(a); }
extern "C" __global__ void mul_c_f16_bf16(const Args a) { grid_dependency(); binary_c<op_mul, half_t, bf16_t>(a); }
extern "C" __global__ void div_f16_f32(const Args a) { grid_dependency(); binary<op_div, half_t, float>(a); }
extern "C" __global__ void div_c_f16_f32(const Args a) { grid_dependency(); binary_c<op_div, half_t, float>(a); }
extern "C" __global__ void div_f16_f16(const Args a) { grid_dependency(); binary<op_div, half_t, half_t>(a); }
extern "C" __global__ void div_c_f16_f16(const Args a) { grid_dependency(); binary_c<op_div, half_t, half_t>(a); }
extern "C" __global__ void div_f16_bf16(const Args a) { grid_dependency(); binary<op_div, half_t, bf16_t>(a); }
extern "C" __global__ void div_c_f16_bf16(const Args a) { grid_dependency(); binary_c<op_div, half_t, bf16_t>(a); }
