// The binary ops add, sub, mul, div of an F32 a and a b of any float type, strided and flat (`_c_`).
#include "elementwise.cuh"

extern "C" __global__ void add_f32_f32(const Args a) { grid_dependency(); binary<op_add, float, float>(a); }
extern "C" __global__ void add_c_f32_f32(const Args a) { grid_dependency(); binary_c<op_add, float, float>(a); }
extern "C" __global__ void add_f32_f16(const Args a) { grid_dependency(); binary<op_add, float, half_t>(a); }
extern "C" __global__ void add_c_f32_f16(const Args a) { grid_dependency(); binary_c<op_add, float, half_t>(a); }
extern "C" __global__ void add_f32_bf16(const Args a) { grid_dependency(); binary<op_add, float, bf16_t>(a); }
extern "C" __global__ void add_c_f32_bf16(const Args a) { grid_dependency(); binary_c<op_add, float, bf16_t>(a); }
extern "C" __global__ void sub_f32_f32(const Args a) { grid_dependency(); binary<op_sub, float, float>(a); }
extern "C" __global__ void sub_c_f32_f32(const Args a) { grid_dependency(); binary_c<op_sub, float, float>(a); }
extern "C" __global__ void sub_f32_f16(const Args a) { grid_dependency(); binary<op_sub, float, half_t>(a); }
extern "C" __global__ void sub_c_f32_f16(const Args a) { grid_dependency(); binary_c<op_sub, float, half_t>(a); }
extern "C" __global__ void sub_f32_bf16(const Args a) { grid_dependency(); binary<op_sub, float, bf16_t>(a); }
extern "C" __global__ void sub_c_f32_bf16(const Args a) { grid_dependency(); binary_c<op_sub, float, bf16_t>(a); }
extern "C" __global__ void mul_f32_f32(const Args a) { grid_dependency(); binary<op_mul, float, float>(a); }
extern "C" __global__ void mul_c_f32_f32(const Args a) { grid_dependency(); binary_c<op_mul, float, float>(a); }
extern "C" __global__ void mul_f32_f16(const Args a) { grid_dependency(); binary<op_mul, float, half_t>(a); }
extern "C" __global__ void mul_c_f32_f16(const Args a) { grid_dependency(); binary_c<op_mul, float, half_t>(a); }
extern "C" __global__ void mul_f32_bf16(const Args a) { grid_dependency(); binary<op_mul, float, bf16_t>(a); }
extern "C" __global__ void mul_c_f32_bf16(const Args a) { grid_dependency(); binary_c<op_mul, float, bf16_t>(a); }
extern "C" __global__ void div_f32_f32(const Args a) { grid_dependency(); binary<op_div, float, float>(a); }
extern "C" __global__ void div_c_f32_f32(const Args a) { grid_dependency(); binary_c<op_div, float, float>(a); }
extern "C" __global__ void div_f32_f16(const Args a) { grid_dependency(); binary<op_div, float, half_t>(a); }
extern "C" __global__ void div_c_f32_f16(const Args a) { grid_dependency(); binary_c<op_div, float, half_t>(a); }
extern "C" __global__ void div_f32_bf16(const Args a) { grid_dependency(); binary<op_div, float, bf16_t>(a); }
extern "C" __global__ void div_c_f32_bf16(const Args a) { grid_dependency(); binary_c<op_div, float, bf16_t>(a); }
