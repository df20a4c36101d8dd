// mul_mat's integer dot-product kernel (mmvq, kernels/quant.py): b's columns quantized once per product to q8_1
// blocks of 32 (int8 q, float d = max|x| / 127, d * sum q) in the node's temp block (quantize_q8_1_k), or for small
// products by each block into its shared memory (mmvq_s*: no second launch), then a warp per row of the quantized a,
// its lanes taking a "unit" (32 or 64 elements, whole sub-blocks) of the row at a time: the unit's quants unpacked to
// bytes and multiplied with __dp4a, the scales applied per sub-block. Every column n < N <= MMV_MAX_N at once (the
// batch kernels mmvq_b*: N <= MMVQ_MAX_BATCH); blockDim.x / 32 rows per block. Fused epilogues (iop): MMVQ_RESIDUAL
// adds src2 (F32, dst's layout); the glu kernels read a second weight matrix at src2 (the up rows, a's layout) and
// write silu(a x) * (up x). Instantiated by quant_<type>.cu (the kernels) and quant.cu (the quantizing kernel).
#pragma once
#include "quant.cuh"

#define MMVQ_RESIDUAL 1
#define MMVQ_WEIGHTS 2
#define MMVQ_COPY 2                             // mmvq_k's SHARED: b's q8_1 columns copied from the temp block

// n bytes of q8_1 columns at q (16-byte aligned) and their n / 32 (d, d sum q) at ds (8-byte aligned) into shared
// memory at sq (quantize_cols' layout: the pairs after the bytes), by the whole block
__device__ __forceinline__ void copy_q8_cols(const char* q, const char* ds, int n, signed char* sq) {
    #pragma unroll 4
    for (int i = threadIdx.x; i < n >> 4; i += blockDim.x) ((int4*)sq)[i] = ((const int4*)q)[i];
    #pragma unroll 4
    for (int i = threadIdx.x; i < n >> 5; i += blockDim.x) ((int2*)(sq + n))[i] = ((const int2*)ds)[i];
}

// the temp block: column c = n + N * (i2 + B2 * i3) of b as K int8 at c * K, then C * K / 32 float2 (d, d * sum q)
__device__ void quantize_q8_1_k(const Args& a) {        // dst: the temp; src0: b F32 (K, N, B2, B3), any strides
    const int lane = threadIdx.x & 31;
    const i64 kb = a.ne0[0] >> 5, blocks = kb * a.ne0[1] * a.ne0[2] * a.ne0[3];
    const i64 C = a.ne0[1] * a.ne0[2] * a.ne0[3];
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < blocks; w += ((i64)gridDim.x * blockDim.x) >> 5) {
        const i64 c = w / kb, k = (w % kb) * 32 + lane;
        const i64 n = c % a.ne0[1], i2 = (c / a.ne0[1]) % a.ne0[2], i3 = c / (a.ne0[1] * a.ne0[2]);
        const float x = *(const float*)(a.src0 + k * a.nb0[0] + n * a.nb0[1] + i2 * a.nb0[2] + i3 * a.nb0[3]);
        quantize_32(x, lane, (signed char*)a.dst + c * a.ne0[0] + k - lane, (float2*)(a.dst + C * a.ne0[0]) + w);
    }
}

// t[i] = the 4 bytes at p + 4i (p 2-byte aligned) from 16-byte loads of the aligned chunks holding them (a few
// loads, each a whole sector, where 2-byte loads of lanes 18-34 bytes apart take a wavefront a line each)
template <int NW> __device__ __forceinline__ void words_at2(const char* p, int* t) {
    constexpr int NV = (4 * NW + 14 + 15) / 16;
    const int o = (int)((unsigned long long)p & 15), k = o >> 2, sh = (o & 2) * 8;
    const int4* c = (const int4*)(p - o);
    int w[4 * NV + 4];
    #pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int4 x = 16 * v < o + 4 * NW ? c[v] : make_int4(0, 0, 0, 0);
        w[4 * v] = x.x; w[4 * v + 1] = x.y; w[4 * v + 2] = x.z; w[4 * v + 3] = x.w;
    }
    #pragma unroll
    for (int i = 4 * NV; i < 4 * NV + 4; ++i) w[i] = 0;
    int s[NW + 1];
    #pragma unroll
    for (int i = 0; i <= NW; ++i) s[i] = k == 0 ? w[i] : k == 1 ? w[i + 1] : k == 2 ? w[i + 2] : w[i + 3];
    #pragma unroll
    for (int i = 0; i < NW; ++i) t[i] = (int)__funnelshift_r((unsigned)s[i], (unsigned)s[i + 1], sh);
}
// t[i] = the 4 bytes at p + 4i (p 2-byte aligned) from NW + 1 4-byte loads of the aligned words holding them and
// funnel shifts: fewer registers than words_at2 (no select of words by p's offset), which kept the stream kernels
// (mmvq_v) of Q8_0 and Q6_K spilling
template <int NW> __device__ __forceinline__ void words_at4(const char* p, int* t) {
    const int* c = (const int*)((unsigned long long)p & ~3ull);
    const unsigned sh = ((unsigned)(unsigned long long)p & 2u) * 8u;
    int w[NW + 1];
    #pragma unroll
    for (int i = 0; i <= NW; ++i) w[i] = c[i];
    #pragma unroll
    for (int i = 0; i < NW; ++i) t[i] = (int)__funnelshift_r((unsigned)w[i], (unsigned)w[i + 1], sh);
}
__device__ __forceinline__ int i32_at4(const char* p) { return *(const int*)p; }
// the fifth bits 4i .. 4i + 3 of qh as bit 4 of each byte
__device__ __forceinline__ int bit4(unsigned qh, int i) {
    const unsigned h = qh >> (4 * i);
    return (int)(((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25));
}
__device__ __forceinline__ void x_ints(const signed char* xq, int* x, int n4) {   // n4 int4 loads of activations
    #pragma unroll
    for (int j = 0; j < n4; ++j) { const int4 v = ((const int4*)xq)[j]; x[4 * j] = v.x; x[4 * j + 1] = v.y; x[4 * j + 2] = v.z; x[4 * j + 3] = v.w; }
}
template <int N> __device__ __forceinline__ int dp4(const int* q, const int* x) {
    int s = 0;
    #pragma unroll
    for (int i = 0; i < N; ++i) s = __dp4a(q[i], x[i], s);
    return s;
}

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: a unit is one 32-block of SIZE bytes: d (and m at 2), QH: the 32 fifth bits, QS the
// quants (nibbles: element j low in byte j & 15 when j < 16, else high; Q8_0: int8); ALIGN4: 4-byte loads (else
// words_at2)
template <int SIZE, int QS, int QH, bool MIN, int OFFSET, bool ALIGN4> struct q32 {
    static constexpr int UNIT = 32, BYTES = 8 * SIZE;          // BYTES: of 256 elements
    struct W { float d, m; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)u * SIZE;
        w.d = half_at(b); w.m = MIN ? half_at(b + 2) : 0.f;
        if (SIZE == 34) {
            words_at4<8>(b + QS, w.q);
            return;
        }
        int v[QH ? 5 : 4];
        if (ALIGN4) {
            #pragma unroll
            for (int i = 0; i < (QH ? 5 : 4); ++i) v[i] = i32_at4(b + (QH ? QH : QS) + 4 * i);
        } else {
            words_at4<QH ? 5 : 4>(b + (QH ? QH : QS), v);
        }
        const unsigned qh = QH ? (unsigned)v[0] : 0u;
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int x = v[i + (QH ? 1 : 0)];
            w.q[i] = (x & 0x0F0F0F0F) | (QH ? bit4(qh, i) : 0);
            w.q[i + 4] = ((x >> 4) & 0x0F0F0F0F) | (QH ? bit4(qh, i + 4) : 0);
        }
    }
    // sum over the unit of w * x: d (dx sum q x - OFFSET dx sum x) or d dx sum q x + m dx sum x
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        const float2 s = ds[0];
        const float sumi = (float)dp4<8>(w.q, x);
        return MIN ? w.d * s.x * sumi + w.m * s.y : w.d * (s.x * sumi - (float)OFFSET * s.y);
    }
};
typedef q32<18, 2, 0, false, 8, false> mq_q4_0;
typedef q32<20, 4, 0, true, 0, true> mq_q4_1;
typedef q32<22, 6, 2, false, 16, false> mq_q5_0;
typedef q32<24, 8, 4, true, 0, true> mq_q5_1;
typedef q32<34, 2, 0, false, 0, false> mq_q8_0;

// Q4_K, Q5_K: a unit is sub-blocks 2j and 2j + 1 (64 elements) of a 256-block: their nibbles are the low and high
// halves of the 32 bytes at QS + 32 j (16-byte aligned: 128-bit loads), Q5_K's fifth bits bits 2j, 2j + 1 of the
// 32 bytes at 16; value d sc q - dmin m per sub-block (scale_min_k4)
template <int SIZE, bool HIGH> struct qk45 {
    static constexpr int UNIT = 64, BYTES = SIZE;
    struct W { float d0, d1, m0, m1; int q[16]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 2) * SIZE;
        const int j = u & 3;
        float sc0, sc1, m0, m1;
        scale_min_k4((const unsigned char*)b + 4, 2 * j, &sc0, &m0);
        scale_min_k4((const unsigned char*)b + 4, 2 * j + 1, &sc1, &m1);
        const float d = half_at(b), dmin = half_at(b + 2);
        w.d0 = d * sc0; w.d1 = d * sc1; w.m0 = dmin * m0; w.m1 = dmin * m1;
        int v[8], h[8];
        x_ints((const signed char*)b + (HIGH ? 48 : 16) + 32 * j, v, 2);
        if (HIGH) x_ints((const signed char*)b + 16, h, 2);
        #pragma unroll
        for (int i = 0; i < 8; ++i) {
            w.q[i] = (v[i] & 0x0F0F0F0F) | (HIGH ? ((h[i] >> (2 * j)) & 0x01010101) << 4 : 0);
            w.q[i + 8] = ((v[i] >> 4) & 0x0F0F0F0F) | (HIGH ? ((h[i] >> (2 * j + 1)) & 0x01010101) << 4 : 0);
        }
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[16];
        x_ints(xq, x, 4);
        const float2 s0 = ds[0], s1 = ds[1];
        return w.d0 * s0.x * (float)dp4<8>(w.q, x) + w.d1 * s1.x * (float)dp4<8>(w.q + 8, x + 8)
               - (w.m0 * s0.y + w.m1 * s1.y);
    }
};
typedef qk45<144, false> mq_q4_k;
typedef qk45<176, true> mq_q5_k;

// Q6_K: a unit is quarter k of half h of a 210-byte 256-block (32 elements, u & 7 = 4h + k): low 4 bits from the
// 32 bytes of ql at 64h + 32(k & 1) (low nibbles for k < 2), 2 high bits at 2k of the 32 bytes of qh at 128 + 32h;
// int8 scales 8h + 2k (elements 0-15) and 8h + 2k + 1 (16-31), d at 208. Blocks are 2-byte aligned. The quants stay
// unsigned (0..63): the -32 is taken as 32 sum x per scale (dp4a with ones; the same integer sums)
struct mq_q6_k {
    static constexpr int UNIT = 32, BYTES = 210;
    struct W { float d0, d1; int q[8]; };
    static __device__ __forceinline__ void load(const char* row, int u, W& w) {
        const char* b = row + (i64)(u >> 3) * 210;
        const int h = (u >> 2) & 1, k = u & 3;
        const float d = half_at(b + 208);
        w.d0 = d * (float)(signed char)b[192 + 8 * h + 2 * k];
        w.d1 = d * (float)(signed char)b[192 + 8 * h + 2 * k + 1];
        int l[8], hb[8];
        words_at4<8>(b + 64 * h + 32 * (k & 1), l);
        words_at4<8>(b + 128 + 32 * h, hb);
        #pragma unroll
        for (int i = 0; i < 8; ++i) w.q[i] = ((l[i] >> (4 * (k >> 1))) & 0x0F0F0F0F) | (((hb[i] >> (2 * k)) & 0x03030303) << 4);
    }
    static __device__ __forceinline__ float dot(const W& w, const signed char* xq, const float2* ds) {
        int x[8];
        x_ints(xq, x, 2);
        constexpr int ONES[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
        const int s0 = dp4<4>(w.q, x) - 32 * dp4<4>(ONES, x), s1 = dp4<4>(w.q + 4, x + 4) - 32 * dp4<4>(ONES, x + 4);
        return ds[0].x * (w.d0 * (float)s0 + w.d1 * (float)s1);
    }
};

#define MMVQ_LOADS 8                            // 32-blocks of b a warp of mmvq_s loads before quantizing them
extern __shared__ int4 mmvq_shared[];           // SHARED: this matrix's columns of b as q8_1 (N K int8, N K / 32 float2)

// N columns of K values at(k, n) quantized to q8_1 by the block's warps (column n's int8 at q + n K, its (d, d sum q)
// at ds + n K / 32: the temp block's layout), or by those of `parts` blocks, this one `part` of them; a round issues
// every load, then quantizes
template <typename F> __device__ __forceinline__ void quantize_cols(int K, int N, F at, signed char* q, float2* ds,
                                                                   int part = 0, int parts = 1) {
    const int lane = threadIdx.x & 31, warps = (blockDim.x >> 5) * parts;
    const int warp = (threadIdx.x >> 5) + part * (blockDim.x >> 5);
    const int kb = K >> 5, blocks = N * kb;
    for (int w0 = warp; w0 < blocks; w0 += MMVQ_LOADS * warps) {
        float x[MMVQ_LOADS];
        #pragma unroll
        for (int i = 0; i < MMVQ_LOADS; ++i) {
            const int w = w0 + i * warps;
            x[i] = w < blocks ? at((w % kb) * 32 + lane, w / kb) : 0.f;
        }
        #pragma unroll
        for (int i = 0; i < MMVQ_LOADS; ++i) {
            const int w = w0 + i * warps;
            if (w < blocks) quantize_32(x[i], lane, q + (w / kb) * K + (w % kb) * 32, ds + w);
        }
    }
}

// NM (a power of two, at most 32) per-lane partial sums v[c] of columns c summed over the warp: each round halves the
// columns a lane keeps, adding its partner's half (NM - 1 shuffles, then log2(32 / NM) for the last): lane l returns
// column l / (32 / NM)'s sum (the batch kernels: 16 shuffles for 16 columns where a tree a column takes 80)
__host__ __device__ constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }
template <int NM> __device__ __forceinline__ float reduce_cols(float* v) {
    constexpr int ROUNDS = log2_of(NM);
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
        const int h = (NM / 2) >> r, o = 16 >> r;
        const bool hi = lane & o;
        #pragma unroll
        for (int i = 0; i < NM / 2; ++i) {      // to NM / 2 with a test, not to h: else v is put in local memory
            if (i >= h) break;
            const float lo_v = v[i], hi_v = v[i + h];            // values, not a select of addresses
            v[i] = (hi ? hi_v : lo_v) + __shfl_xor_sync(0xffffffffu, hi ? lo_v : hi_v, o);
        }
    }
    #pragma unroll
    for (int o = 16 / NM; o > 0; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    return v[0];
}

// a warp's RW rows of a at row, row + nb, .. (`rows` of them, fewer at the end, none past it; with GLU the up rows
// at urow) times the N <= NM quantized columns (xq, xds: quantize_cols' layout), R units a lane loads before it
// multiplies them; the first R are loaded before ready(), which every thread calls once (the grid wait, b quantized
// into shared memory: weight loads overlap them); put(j, n, row j . x_n, up row j . x_n) on every lane once summed
// (NM > MMV_MAX_N: on the lanes reduce_cols leaves column n's sum on, where n < N).
// A row's sum is the same whatever RW (each lane takes the same units in the same order)
template <typename Q, bool GLU, int R, int RW, int NM, typename F, typename P> __device__ __forceinline__ void mmvq_rows(
        const char* row, const char* urow, i64 nb, int rows, const signed char* xq, const float2* xds, int K, int N,
        F ready, P put) {
    const int lane = threadIdx.x & 31, units = rows > 0 ? K / Q::UNIT : 0;
    float acc[RW][NM], up[RW][GLU ? NM : 1];
    #pragma unroll
    for (int j = 0; j < RW; ++j) {
        #pragma unroll
        for (int n = 0; n < NM; ++n) { acc[j][n] = 0.f; if (GLU) up[j][GLU ? n : 0] = 0.f; }
    }
    typename Q::W w[R][RW], wu[GLU ? R : 1][RW];
    auto load = [&](int u0) {
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            if (u0 + 32 * r >= units) break;
            #pragma unroll
            for (int j = 0; j < RW; ++j) {
                const i64 o = (i64)min(j, rows - 1) * nb;
                Q::load(row + o, u0 + 32 * r, w[r][j]);
                if (GLU) Q::load(urow + o, u0 + 32 * r, wu[GLU ? r : 0][j]);
            }
        }
    };
    load(lane);
    ready();
    for (int u0 = lane; u0 < units; u0 += 32 * R) {
        if (u0 != lane) load(u0);
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            const int u = u0 + 32 * r;
            if (u >= units) break;
            #pragma unroll
            for (int n = 0; n < NM; ++n) {
                if (n < N) {
                    const signed char* x = xq + (i64)n * K + u * Q::UNIT;
                    const float2* s = xds + (i64)n * (K >> 5) + u * (Q::UNIT >> 5);
                    #pragma unroll
                    for (int j = 0; j < RW; ++j) {
                        acc[j][n] += Q::dot(w[r][j], x, s);
                        if (GLU) up[j][GLU ? n : 0] += Q::dot(wu[GLU ? r : 0][j], x, s);
                    }
                }
            }
        }
    }
    if constexpr (NM > MMV_MAX_N) {                 // the batch kernels: each column's sum on 32 / NM lanes
        const int c = lane / (32 / NM);
        #pragma unroll
        for (int j = 0; j < RW; ++j) {
            if (j >= rows) break;
            const float v = reduce_cols<NM>(acc[j]);
            float g = 0.f;
            if constexpr (GLU) g = reduce_cols<NM>(up[j]);
            if (lane % (32 / NM) == 0 && c < N) put(j, c, v, g);
        }
        return;
    }
    #pragma unroll
    for (int j = 0; j < RW; ++j) {
        if (j >= rows) break;
        #pragma unroll
        for (int n = 0; n < NM; ++n) {
            if (n >= N) break;
            float v = acc[j][n], g = GLU ? up[j][GLU ? n : 0] : 0.f;
            for (int o = 16; o > 0; o >>= 1) {
                v += __shfl_xor_sync(0xffffffffu, v, o);
                if (GLU) g += __shfl_xor_sync(0xffffffffu, g, o);
            }
            put(j, n, v, g);
        }
    }
}

__device__ __forceinline__ float silu_mul(float v, float g) { return v / (1.f + __expf(-v)) * g; }

// a warp's weight row (its bytes) asked into L1 (a line a lane)
__device__ __forceinline__ void prefetch_row(const char* row, i64 bytes) {
    for (i64 o = (threadIdx.x & 31) * 128; o < bytes; o += 32 * 128) asm volatile("prefetch.global.L1 [%0];" :: "l"(row + o));
}

// dst F32 (M, N, B2, B3) = a (K, M, A2, A3) x the quantized columns of b (ne1 = b's ne): src1 the temp block (SHARED 0;
// MMVQ_COPY: the block's matrix's columns copied from it into shared memory first), or with SHARED 1 b itself (F32,
// nb1), its N columns of matrix (i2, i3) quantized by the block into shared memory first. A
// warp per RW rows from m, blockIdx.y the matrix (i2, i3) of b, a broadcast over it; GLU: src2 the up rows (a's
// layout), dst = silu(a x) * (up x); else iop MMVQ_RESIDUAL: dst = a x + src2 (F32, dst's layout). iop MMVQ_WEIGHTS:
// a (and the up rows) are model weights, which no kernel writes: their first loads come before the grid wait (PDL)
template <typename Q, bool GLU, int SHARED, int R, int RW, int NM> __device__ void mmvq_k(const Args& a) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const i64 i2 = blockIdx.y % a.ne1[2], i3 = blockIdx.y / a.ne1[2];
    const int K = (int)a.ne0[0], N = (int)a.ne1[1];
    const i64 m = ((i64)blockIdx.x * warps + warp) * RW;
    const int rows = (int)min((i64)RW, a.ne0[1] - m);
    const i64 off = m * a.nb0[1] + i2 / (a.ne1[2] / a.ne0[2]) * a.nb0[2] + i3 / (a.ne1[3] / a.ne0[3]) * a.nb0[3];
    const bool early = a.iop & MMVQ_WEIGHTS;
    if (!early) grid_dependency();
    signed char* sq = (signed char*)mmvq_shared;
    const i64 c0 = (i64)N * blockIdx.y, C = a.ne1[1] * a.ne1[2] * a.ne1[3];
    const signed char* xq = SHARED ? sq : (const signed char*)a.src1 + c0 * K;
    const float2* xds = SHARED ? (const float2*)(sq + N * K) : (const float2*)(a.src1 + C * K) + c0 * (K >> 5);
    mmvq_rows<Q, GLU, R, RW, NM>(a.src0 + off, GLU ? a.src2 + off : nullptr, a.nb0[1], rows, xq, xds, K, N, [&]() {
        if (early) grid_dependency();
        if (SHARED == MMVQ_COPY) {
            copy_q8_cols(a.src1 + c0 * K, (const char*)((const float2*)(a.src1 + C * K) + c0 * (K >> 5)), N * K, sq);
            __syncthreads();
        }
        if (SHARED != 1) return;
        const char* b = a.src1 + i2 * a.nb1[2] + i3 * a.nb1[3];
        quantize_cols(K, N, [&](int k, int n) { return *(const float*)(b + k * a.nb1[0] + n * a.nb1[1]); },
                      sq, (float2*)(sq + N * K));
        __syncthreads();
    }, [&](int j, int n, float v, float g) {
        if (NM <= MMV_MAX_N && lane != 0) return;
        const i64 o = (m + j) * a.nb[0] + n * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3];
        if (GLU) v = silu_mul(v, g);
        else if (a.iop & MMVQ_RESIDUAL) v += *(const float*)(a.src2 + o);
        *(float*)(a.dst + o) = v;
    });
}

// One column of b (N = 1) and one matrix, rows of at most 32 R units: a few blocks an SM (quant.py's mmvq_stream),
// each warp streaming rows gw, gw + warps, ... with the next row's weights loaded before the current row's dot products
// (two rows in flight a warp, where the one-row-a-warp kernel leaves the memory system waiting at each row's end).
// GLU, MMVQ_RESIDUAL and MMVQ_WEIGHTS as mmvq_k; b's column quantized in the temp block (src1).
template <typename Q, bool GLU, int R> __device__ void mmvq_stream_k(const Args& a) {
    typedef typename Q::W W;
    const int lane = threadIdx.x & 31, units = (int)a.ne0[0] / Q::UNIT;
    const i64 M = a.ne0[1], warps = ((i64)gridDim.x * blockDim.x) >> 5;
    const signed char* xq = (const signed char*)a.src1;
    const float2* xds = (const float2*)(a.src1 + a.ne0[0]);
    W w0[R], w1[R], u0[GLU ? R : 1], u1[GLU ? R : 1];
    auto load = [&](i64 m, W* g, W* u) {
        const i64 o = m * a.nb0[1];
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            const int k = lane + 32 * r;
            if (k >= units) break;
            Q::load(a.src0 + o, k, g[r]);
            if (GLU) Q::load(a.src2 + o, k, u[r]);
        }
    };
    auto finish = [&](i64 m, const W* g, const W* u) {
        float v = 0.f, up = 0.f;
        #pragma unroll
        for (int r = 0; r < R; ++r) {
            const int k = lane + 32 * r;
            if (k >= units) break;
            v += Q::dot(g[r], xq + k * Q::UNIT, xds + k * (Q::UNIT >> 5));
            if (GLU) up += Q::dot(u[r], xq + k * Q::UNIT, xds + k * (Q::UNIT >> 5));
        }
        for (int o = 16; o > 0; o >>= 1) {
            v += __shfl_xor_sync(0xffffffffu, v, o);
            if (GLU) up += __shfl_xor_sync(0xffffffffu, up, o);
        }
        if (lane != 0) return;
        const i64 o = m * a.nb[0];
        if (GLU) v = silu_mul(v, up);
        else if (a.iop & MMVQ_RESIDUAL) v += *(const float*)(a.src2 + o);
        *(float*)(a.dst + o) = v;
    };
    const bool early = a.iop & MMVQ_WEIGHTS;
    if (!early) grid_dependency();
    i64 m = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (m < M) load(m, w0, u0);
    if (early) grid_dependency();
    while (m < M) {
        const i64 m1 = m + warps, m2 = m1 + warps;
        if (m1 < M) load(m1, w1, u1);
        finish(m, w0, u0);
        if (m1 >= M) break;
        if (m2 < M) load(m2, w0, u0);
        finish(m1, w1, u1);
        m = m2;
    }
}
template <typename Q, bool GLU> __device__ __forceinline__ void mmvq_stream_entry(const Args& a) {
    if (a.ip[0] == 1) mmvq_stream_k<Q, GLU, 1>(a);
    else mmvq_stream_k<Q, GLU, 2>(a);
}

// 128 registers a thread at most: one block of mmvq_s (quant.py's MMVQ_SHARED_WARPS 16) an SM, four of mmvq (MMV_WARPS)
// and of the glu stream, eight of the stream (64 registers: quant.py's MMVQ_STREAM_BLOCKS)
#define MMVQ_BOUNDS(SHARED) __launch_bounds__((SHARED) ? 512 : 128, (SHARED) ? 1 : 4)
#define MMVQ_DECLARE(T) extern "C" { \
    __global__ void MMVQ_BOUNDS(false) mmvq_##T(const Args a); \
    __global__ void MMVQ_BOUNDS(false) mmvq_glu_##T(const Args a); \
    __global__ void MMVQ_BOUNDS(true) mmvq_s_##T(const Args a); \
    __global__ void MMVQ_BOUNDS(true) mmvq_s_glu_##T(const Args a); \
    __global__ void __launch_bounds__(128, 8) mmvq_v_##T(const Args a); \
    __global__ void __launch_bounds__(128, 4) mmvq_v_glu_##T(const Args a); \
    __global__ void MMVQ_BOUNDS(false) mmvq_b_##T(const Args a); \
    __global__ void MMVQ_BOUNDS(false) mmvq_b_glu_##T(const Args a); }

// the kernel entries: a.ip[0] > 1 (one column of b, rows of at most 32 units: quant.py's mmvq_rows_per_warp) RW rows
// a warp, one unit each lane; else a row a warp, R units a lane (SHARED: 2, 1 with GLU; big products: more in flight)
template <typename Q, bool GLU, bool SHARED> __device__ __forceinline__ void mmvq_entry(const Args& a) {
    if (!SHARED && a.ip[0] > 1) mmvq_k<Q, GLU, false, 1, GLU ? 2 : 4, 1>(a);
    else mmvq_k<Q, GLU, SHARED, SHARED ? (GLU ? 1 : 2) : GLU ? 2 : 4, 1, MMV_MAX_N>(a);
}

// the batch entries (quant.py's mmvq_batch: MMV_MAX_N < N <= MMVQ_MAX_BATCH columns of b, quantized in the temp block):
// a warp's rows read once for every column; a.ip[0] rows a warp (2: each column's activations loaded once for both),
// a.ip[1]: the columns copied into shared memory first (quant.py's mmvq_batch_plan)
template <typename Q, bool GLU> __device__ __forceinline__ void mmvq_batch_entry(const Args& a) {
    if (!GLU && a.ip[0] > 1) {
        if (a.ip[1]) mmvq_k<Q, false, MMVQ_COPY, 1, 2, MMVQ_MAX_BATCH>(a);
        else mmvq_k<Q, false, 0, 1, 2, MMVQ_MAX_BATCH>(a);
    } else if (a.ip[1]) {
        mmvq_k<Q, GLU, MMVQ_COPY, GLU ? 1 : 2, 1, MMVQ_MAX_BATCH>(a);
    } else {
        mmvq_k<Q, GLU, 0, GLU ? 1 : 2, 1, MMVQ_MAX_BATCH>(a);
    }
}
