// IQ4_NL and IQ4_XS (quant_iq4_nl.cu, quant_iq4_xs.cu): a nibble indexes ggml's kvalues_iq4nl (types.py's
// KVALUES_IQ4NL), times the scale of its block (IQ4_NL) or sub-block of 32 (IQ4_XS); nibbles of 16 bytes hold 32
// values as Q4_0's (element l low in byte l & 15 when l < 16, else high). The dequantizing functors dq_<type> and the
// integer-dot-product units mq_<type> (quant_mmvq.cuh's interface) are here, shared with mul_mat_id (moe.cu).
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

struct dq_iq4_nl { static __device__ void at8(const char* r, i64, int c, float* v) {
    const char* b = r + (c >> 2) * 18;
    const int j0 = (c & 3) << 3;
    iq4_at8((const unsigned char*)b + 2 + (j0 & 15), (j0 >> 4) << 2, half_at(b), v);
} };

// a unit is one block; blocks are 2-byte aligned
struct mq_iq4_nl {
    static constexpr int UNIT = 32, BYTES = 8 * 18;
    struct W { float d; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)u * 18;
        w.d = half_at(b);
        int v[4];
        words_at2<4>(b + 2, v);
        iq4_lookup32(v, w.q);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        return w.d * ds[0].x * (float)dp4<8>(w.q, x);
    }
};

// d * (scale - 32) of sub-block ib of the block at b
__device__ __forceinline__ float iq4_xs_scale(const unsigned char* b, int ib) {
    const int high = ((b[2] | b[3] << 8) >> (2 * ib)) & 3, low = (b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 15;
    return half_at((const char*)b) * (float)((low | high << 4) - 32);
}

struct dq_iq4_xs { static __device__ void at8(const char* r, i64, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * 136;
    const int j0 = (c & 31) << 3, ib = j0 >> 5, l0 = j0 & 31;
    iq4_at8(b + 8 + 16 * ib + (l0 & 15), (l0 >> 4) << 2, iq4_xs_scale(b, ib), v);
} };

// a unit is one sub-block of 32 (u & 7); blocks are 2-byte aligned (words_at2)
struct mq_iq4_xs {
    static constexpr int UNIT = 32, BYTES = 136;
    struct W { float d; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 3) * 136;
        const int ib = u & 7;
        w.d = iq4_xs_scale((const unsigned char*)b, ib);
        int v[4];
        words_at2<4>(b + 8 + 16 * ib, v);
        iq4_lookup32(v, w.q);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        return w.d * ds[0].x * (float)dp4<8>(w.q, x);
    }
};
