// The argument struct of the generated elementwise-chain kernels (kernels/generated.py writes one kernel per chain;
// EwArgs there is its ctypes twin): the result, its ne, and up to 8 operands with their ne and nb, 8 float params.
#pragma once
#include "common.cuh"

struct EwArgs {
    char* dst; i64 n; i64 ne[4];
    const char* src[8]; i64 sne[8][4]; i64 snb[8][4];
    float p[8];
};
