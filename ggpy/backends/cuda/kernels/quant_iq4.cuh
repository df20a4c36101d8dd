// IQ4_NL and IQ4_XS (quant_iq4_nl.cu, quant_iq4_xs.cu): a nibble indexes ggml's kvalues_iq4nl (types.py's
// KVALUES_IQ4NL), times the scale of its block (IQ4_NL) or sub-block of 32 (IQ4_XS); nibbles of 16 bytes hold 32
// values as Q4_0's (element l low in byte l & 15 when l < 16, else high).
#pragma once
#include "quant_mmvq.cuh"

__device__ __forceinline__ float iq4_value(int q) {
    constexpr signed char kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return (float)kv[q];
}
// 8 values d * kvalues[nibble] from the nibbles (shift 0: low, 4: high) of the 8 bytes at q
__device__ __forceinline__ void iq4_at8(const unsigned char* q, int shift, float d, float* v) {
    #pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = d * iq4_value((q[k] >> shift) & 15);
}
// the 4 indices (bytes 0-15) of x mapped to their int8 kvalues: __byte_perm picks from the table's first or last 8
// bytes (little-endian words) by each index's low 3 bits, its bit 3 chooses between the two
__device__ __forceinline__ int iq4_lookup4(int x) {
    const int t = x & 0x07070707;
    const int s = (t & 0x7) | ((t >> 4) & 0x70) | ((t >> 8) & 0x700) | ((t >> 12) & 0x7000);
    const int lo = (int)__byte_perm(0xBFAD9881u, 0xF6EADDCFu, s), hi = (int)__byte_perm(0x26190D01u, 0x71594535u, s);
    const int m = ((x >> 3) & 0x01010101) * 0xFF;
    return (lo & ~m) | (hi & m);
}
// 8 words of lookups from the 16 bytes of nibbles v[0..3]: values 0-15 (low nibbles) in q[0..3], 16-31 in q[4..7]
__device__ __forceinline__ void iq4_lookup32(const int* v, int* q) {
    #pragma unroll
    for (int i = 0; i < 4; ++i) { q[i] = iq4_lookup4(v[i] & 0x0F0F0F0F); q[i + 4] = iq4_lookup4((v[i] >> 4) & 0x0F0F0F0F); }
}
