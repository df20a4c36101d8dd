// ggml's block-quantized types (kernels/quant.py): a functor per type, `dq_<type>::at8(row, nb0, c, v)` putting
// elements 8c .. 8c + 7 of a row in v (ggml's dequantize_row_* formulas, in float32; dq_float<T> reads a float row of
// element stride nb0), and the kernels on them: dequantizing copies, get_rows, the dot-product kernel of mul_mat (mmv,
// MMV_MAX_N from the compiler's options) and the quantizing copies; instantiated by quant*.cu and matmul.cu.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float half_at(const char* p) { return to_f(*(const half_t*)p); }
__device__ __forceinline__ unsigned u32_at(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | p[3] << 24; }
// Q4_0, Q4_1, Q5_0, Q5_1: 32-blocks of SIZE bytes: f16 d (and m), QH: byte of the 32 fifth bits (0: none), QS: the
// nibbles (element j low in byte j & 15 when j < 16, else high); value d * (q - OFFSET), or d * q + m
template <int SIZE, int QS, int QH, bool MIN, int OFFSET> __device__ __forceinline__ void dq32(const char* r, int c, float* v) {
    const char* b = r + (c >> 2) * SIZE;
    const int j0 = (c & 3) << 3, sh = (j0 >> 4) << 2;
    const float d = half_at(b), m = MIN ? half_at(b + 2) : 0.f;
    const unsigned char* q = (const unsigned char*)b + QS + (j0 & 15);
    const unsigned h = QH ? u32_at((const unsigned char*)b + QH) >> j0 : 0u;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int x = ((q[j] >> sh) & 15) | (QH ? ((h >> j) & 1) << 4 : 0);
        v[j] = MIN ? d * (float)x + m : d * (float)(x - OFFSET);
    }
}
// Every type is a functor: at8(row, nb0, c, v) puts elements 8c .. 8c + 7 of a row in v (quantized rows are
// contiguous blocks and ignore nb0, the element stride of the float types)
struct dq_q4_0 { static __device__ void at8(const char* r, i64, int c, float* v) { dq32<18, 2, 0, false, 8>(r, c, v); } };
struct dq_q4_1 { static __device__ void at8(const char* r, i64, int c, float* v) { dq32<20, 4, 0, true, 0>(r, c, v); } };
struct dq_q5_0 { static __device__ void at8(const char* r, i64, int c, float* v) { dq32<22, 6, 2, false, 16>(r, c, v); } };
struct dq_q5_1 { static __device__ void at8(const char* r, i64, int c, float* v) { dq32<24, 8, 4, true, 0>(r, c, v); } };
struct dq_q8_0 { static __device__ void at8(const char* r, i64, int c, float* v) {
    const char* b = r + (c >> 2) * 34;
    const float d = half_at(b);
    #pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = d * (float)(signed char)b[2 + ((c & 3) << 3) + j];
} };
// Q4_K / Q5_K: 256-blocks of 8 sub-blocks of 32; sub-block s has a 6-bit scale and min packed in 12 bytes
// (get_scale_min_k4); its nibbles are the low (s even) or high halves of 32 bytes, Q5_K's fifth bits bit s of 32 more
__device__ __forceinline__ void scale_min_k4(const unsigned char* q, int s, float* sc, float* m) {
    if (s < 4) { *sc = q[s] & 63; *m = q[s + 4] & 63; }
    else { *sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4); *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4); }
}
template <int SIZE, bool HIGH> __device__ __forceinline__ void dq_k(const char* r, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * SIZE;
    const int j0 = (c & 31) << 3, s = j0 >> 5, l0 = j0 & 31;
    float sc, m;
    scale_min_k4(b + 4, s, &sc, &m);
    const float d = half_at((const char*)b) * sc, dm = half_at((const char*)b + 2) * m;
    const unsigned char* q = b + (HIGH ? 48 : 16) + ((s >> 1) << 5) + l0;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int x = ((q[j] >> ((s & 1) << 2)) & 15) | (HIGH ? ((b[16 + l0 + j] >> s) & 1) << 4 : 0);
        v[j] = d * (float)x - dm;
    }
}
struct dq_q4_k { static __device__ void at8(const char* r, i64, int c, float* v) { dq_k<144, false>(r, c, v); } };
struct dq_q5_k { static __device__ void at8(const char* r, i64, int c, float* v) { dq_k<176, true>(r, c, v); } };
// Q6_K: halves h of 128; quarter k of a half: the low (k < 2) or high nibbles of 32 bytes of ql, 2 bits at 2k of qh,
// the int8 scale 8h + l / 16 + 2k, d last
struct dq_q6_k { static __device__ void at8(const char* r, i64, int c, float* v) {
    const unsigned char* b = (const unsigned char*)r + (c >> 5) * 210;
    const int j0 = (c & 31) << 3, h = j0 >> 7, k = (j0 >> 5) & 3, l0 = j0 & 31;
    const float d = half_at((const char*)b + 208) * (float)(signed char)b[192 + 8 * h + (l0 >> 4) + 2 * k];
    const unsigned char* ql = b + 64 * h + ((k & 1) << 5) + l0;
    const unsigned char* qh = b + 128 + 32 * h + l0;
    #pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = d * (float)((((ql[j] >> ((k >> 1) << 2)) & 15) | ((qh[j] >> (2 * k)) & 3) << 4) - 32);
} };
template <typename T> struct dq_float { static __device__ void at8(const char* r, i64 nb0, int c, float* v) {
    #pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = to_f(*(const T*)(r + (i64)(8 * c + j) * nb0));
} };

// dst (any float type, src0's element count) = src0 dequantized, in ne order: a thread per 8 elements of a row
// a.ip[0] (layout.py's dense_copy): dst contiguous and 16-byte aligned, its 8 elements one or two 16-byte stores
template <typename Q, typename D> __device__ void dequantize_k(const Args& a) {
    for (i64 ch = (i64)blockIdx.x * blockDim.x + threadIdx.x; ch < a.n >> 3; ch += (i64)gridDim.x * blockDim.x) {
        i64 cs[4], cd[4];
        unravel(ch << 3, a.ne0, cs);
        float v[8];
        Q::at8(a.src0 + cs[1] * a.nb0[1] + cs[2] * a.nb0[2] + cs[3] * a.nb0[3], 0, (int)(cs[0] >> 3), v);
        if (a.ip[0]) {
            __align__(16) D d[8];
            #pragma unroll
            for (int j = 0; j < 8; ++j) d[j] = from_f<D>(v[j]);
            store8(a.dst + (ch << 3) * (i64)sizeof(D), d);
            continue;
        }
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
            unravel((ch << 3) + j, a.ne, cd);
            *(D*)(a.dst + byte_offset(cd, a.nb)) = from_f<D>(v[j]);
        }
    }
}
// get_rows: dst F32 (K, n, A2, A3) = rows src1[i3, i2, i1] of src0 (K, R, A2, A3), dequantized 8 elements a thread
template <typename Q> __device__ void get_rows_q_k(const Args& a) {
    for (i64 ch = (i64)blockIdx.x * blockDim.x + threadIdx.x; ch < a.n >> 3; ch += (i64)gridDim.x * blockDim.x) {
        i64 c[4]; unravel(ch << 3, a.ne, c);
        const i64 r = *(const int*)(a.src1 + c[1] * a.nb1[0] + c[2] * a.nb1[1] + c[3] * a.nb1[2]);
        float v[8];
        Q::at8(a.src0 + r * a.nb0[1] + c[2] * a.nb0[2] + c[3] * a.nb0[3], 0, (int)(c[0] >> 3), v);
        char* d = a.dst + byte_offset(c, a.nb);
        #pragma unroll
        for (int j = 0; j < 8; ++j) *(float*)(d + j * a.nb[0]) = v[j];
    }
}

// dst F32 (M, N, B2, B3) = a (K, M, A2, A3) x b (K, N, B2, B3), K a multiple of 8: a warp per row m of a, which
// its lanes read 8 elements at a time (lane l: elements 8l .. 8l + 7, then 256 further), blockIdx.y the matrix
// (i2, i3) of b (a's broadcast over it); every column n < N <= MMV_MAX_N at once, F32 accumulation
template <typename Q, typename TB> __device__ void mmv_k(const Args& a) {
    const int lane = threadIdx.x & 31;
    const i64 m = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (m >= a.ne0[1]) return;
    const i64 i2 = blockIdx.y % a.ne1[2], i3 = blockIdx.y / a.ne1[2];
    const char* row = a.src0 + m * a.nb0[1] + i2 / (a.ne1[2] / a.ne0[2]) * a.nb0[2] + i3 / (a.ne1[3] / a.ne0[3]) * a.nb0[3];
    const char* col = a.src1 + i2 * a.nb1[2] + i3 * a.nb1[3];
    const int chunks = (int)(a.ne0[0] >> 3), N = (int)a.ne1[1];
    float acc[MMV_MAX_N];
    #pragma unroll
    for (int n = 0; n < MMV_MAX_N; ++n) acc[n] = 0.f;
    #pragma unroll 4                              // the loads of several chunks in flight at once
    for (int c = lane; c < chunks; c += 32) {
        float w[8];
        Q::at8(row, a.nb0[0], c, w);
        const char* x = col + (i64)(8 * c) * a.nb1[0];
        #pragma unroll
        for (int n = 0; n < MMV_MAX_N; ++n) {
            if (n < N) {
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc[n] += w[j] * to_f(*(const TB*)(x + j * a.nb1[0] + n * a.nb1[1]));
            }
        }
    }
    #pragma unroll
    for (int n = 0; n < MMV_MAX_N; ++n) {
        if (n >= N) break;
        float v = acc[n];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) *(float*)(a.dst + m * a.nb[0] + n * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3]) = v;
    }
}

// quantizing copies: a warp per 32-block of dst (its rows contiguous blocks), lane j its element j; src0 F32 read
// in ne order. BITS 8: Q8_0; 4, 5 with SYM: Q4_0, Q5_0 (d = -max / 2^(BITS-1), max the element of largest
// magnitude, the first of equal ones), without: Q4_1, Q5_1 (d = (max - min) / (2^BITS - 1), m = min)
template <int BITS, bool SYM, int SIZE> __device__ void quantize_k(const Args& a) {
    const unsigned full = 0xffffffffu;
    FOR_EACH_ELEMENT(a, i) {
        i64 cs[4], cd[4];
        unravel(i, a.ne0, cs);
        unravel(i, a.ne, cd);
        const int j = (int)(cd[0] & 31);
        const float x = *(const float*)(a.src0 + byte_offset(cs, a.nb0));
        unsigned char* b = (unsigned char*)a.dst + cd[1] * a.nb[1] + cd[2] * a.nb[2] + cd[3] * a.nb[3] + (cd[0] >> 5) * SIZE;
        float big = x != 0.f ? x : 0.f, lo = x, hi = x;          // +0 as ggml's search starts from
        int at = j;
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(full, big, o); const int oat = __shfl_xor_sync(full, at, o);
            if (fabsf(ob) > fabsf(big) || (fabsf(ob) == fabsf(big) && oat < at)) { big = ob; at = oat; }
            lo = fminf(lo, __shfl_xor_sync(full, lo, o)); hi = fmaxf(hi, __shfl_xor_sync(full, hi, o));
        }
        float d;
        if (BITS == 8) d = __fdiv_rn(fabsf(big), 127.f);
        else d = SYM ? __fdiv_rn(big, (float)(-(1 << (BITS - 1)))) : __fdiv_rn(__fsub_rn(hi, lo), (float)((1 << BITS) - 1));
        const float inv = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
        int q;
        if (BITS == 8) q = (int)roundf(__fmul_rn(x, inv));
        else if (SYM) q = min((1 << BITS) - 1, (int)(signed char)(int)__fadd_rn(__fmul_rn(x, inv), (float)(1 << (BITS - 1)) + 0.5f));
        else q = min((1 << BITS) - 1, (int)(unsigned char)(int)__fadd_rn(__fmul_rn(__fsub_rn(x, lo), inv), 0.5f));
        if (j == 0) { *(half_t*)b = from_f<half_t>(d); if (!SYM && BITS != 8) *(half_t*)(b + 2) = from_f<half_t>(lo); }
        if (BITS == 8) { b[2 + j] = (unsigned char)(signed char)q; continue; }
        const int qs = (SYM ? 2 : 4) + (BITS == 5 ? 4 : 0);
        const unsigned qh = __ballot_sync(full, (q >> 4) & 1);
        const int partner = __shfl_down_sync(full, q, 16);
        if (j < 16) b[qs + j] = (unsigned char)((q & 15) | (partner & 15) << 4);
        if (BITS == 5 && j < 4) b[qs - 4 + j] = (unsigned char)(qh >> (8 * j));
    }
}
