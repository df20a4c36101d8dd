// flash_attn_ext (kernels/attention_flash.py): FaArgs (twin of the ctypes struct) and the kernels of few query rows
// (prompt chunks: attention_fa_mma.cuh).
// fa_vec_k: few query rows (a generated token), the keys split in chunks over blockIdx.x; a block takes one chunk of
//   one KV head for RB (query head, row) pairs of its group (blockIdx.z the pairs, blockIdx.y KV head and sequence);
//   a group of D / 8 lanes takes a key, each lane the same 8 elements of q (registers), K and V, so a lane group
//   keeps its own online softmax and accumulator with no exchange but the score's sum; a pass issues every load of
//   its keys (up to NB a lane group) before any math; the lane groups, then the warps merged at the end; one chunk
//   writes dst, several (at most FA_MAXC) write their partial (max, sum, accumulator) in the temp block, merged by
//   the last block of the pairs to arrive (a.count) or else by fa_combine_k. F32 math on F32, F16 or Q8_0 K and V.
// A row whose scores are all -inf gives zeros (as the CPU kernel).
#pragma once
#include "attention.cuh"

struct FaArgs {
    const char* q; const char* k; const char* v; const char* mask; char* dst; float* part;
    i64 qs[3];                  // q: bytes between query rows, heads, sequences
    i64 ks[3]; i64 vs[3];       // k, v: bytes between keys, KV heads, sequences
    i64 ms[3];                  // mask: bytes between query rows, dims 2, 3
    i64 ds[3];                  // dst: bytes between heads, query rows, sequences
    int n, nkv, h, hk, sr;      // query rows, keys, query heads, KV heads, q's sequences per K/V sequence
    int mh, mw, mask_f16;       // the mask's dims 2, 3 and type (0: F32, 1: F16)
    int chunk, nchunks;         // fa_vec_k: keys per block, blocks along the keys
    float scale, softcap, m0, m1;
    int nlog2;                  // ALiBi: slope m0^(h+1) for h < nlog2, else m1^(2(h-nlog2)+1) (m0 = m1 = 1: none)
    int* count;                 // fa_vec_k: chunks arrived per (blockIdx.y, blockIdx.z), zero between kernels (or null)
};

#define FA_WARPS 4
#define FA_MAXC 32              // fa_vec_k: chunks its last block merges at most (attention_flash.py MAX_CHUNKS)

struct q8_0_t {};               // K / V rows of Q8_0 blocks: f16 d, 32 int8 (34 bytes)
// a lane's 8 consecutive elements 8 sub .. 8 sub + 7 of a K / V row: `load` issues the loads, `get` converts
template <typename T> struct FaLd {                 // F16 (rows aligned to 8 bytes)
    uint2 u[2];
    __device__ __forceinline__ void load(const char* r, int sub) {
        u[0] = *(const uint2*)(r + sub * 16); u[1] = *(const uint2*)(r + sub * 16 + 8);
    }
    __device__ __forceinline__ void get(float* x) const {
        const half_t* h = (const half_t*)u;
        #pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = to_f(h[i]);
    }
};
template <> struct FaLd<float> {
    float4 u[2];
    __device__ __forceinline__ void load(const char* r, int sub) {
        u[0] = *(const float4*)(r + sub * 32); u[1] = *(const float4*)(r + sub * 32 + 16);
    }
    __device__ __forceinline__ void get(float* x) const {
        x[0] = u[0].x; x[1] = u[0].y; x[2] = u[0].z; x[3] = u[0].w; x[4] = u[1].x; x[5] = u[1].y; x[6] = u[1].z;
        x[7] = u[1].w;
    }
};
template <> struct FaLd<q8_0_t> {                   // rows aligned to 2 bytes: 16-bit loads
    unsigned short s, w[4];
    __device__ __forceinline__ void load(const char* r, int sub) {
        const unsigned short* b = (const unsigned short*)(r + (sub >> 2) * 34);
        s = b[0];
        #pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = b[1 + (sub & 3) * 4 + i];
    }
    __device__ __forceinline__ void get(float* x) const {
        const float d = to_f((half_t)s);
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            x[2 * i] = d * (float)(signed char)(w[i] & 0xff);
            x[2 * i + 1] = d * (float)(signed char)(w[i] >> 8);
        }
    }
};

__device__ __forceinline__ float fa_slope(const FaArgs& a, int h) {
    return h < a.nlog2 ? powf(a.m0, (float)(h + 1)) : powf(a.m1, (float)(2 * (h - a.nlog2) + 1));
}
__device__ __forceinline__ float fa_mask(const FaArgs& a, const char* row, int j) {
    return a.mask_f16 ? to_f(((const half_t*)row)[j]) : ((const float*)row)[j];
}
__device__ __forceinline__ float fa_warp_max(float x) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float fa_warp_sum(float x) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// element d of output row `row` ((i3 n + i1) h + hq) from the chunks' partials: sum_c acc_c e^(m_c - M) over
// sum_c l_c e^(m_c - M) (read past L1: other blocks wrote them)
template <int DV> __device__ void fa_combine_row(const FaArgs& a, i64 row, int d) {
    const float NEG = __int_as_float(0xff800000);
    const int hq = (int)(row % a.h), i1 = (int)(row / a.h % a.n), i3 = (int)(row / a.h / a.n);
    const float* pr = a.part + row * a.nchunks * (DV + 2);
    float M = NEG, L = 0.f, A = 0.f;
    for (int c = 0; c < a.nchunks; ++c) M = fmaxf(M, __ldcg(pr + c * (DV + 2)));
    for (int c = 0; c < a.nchunks; ++c) {
        const float mc = __ldcg(pr + c * (DV + 2));
        if (mc == NEG) continue;
        const float e = expf(mc - M);
        L += __ldcg(pr + c * (DV + 2) + 1) * e;
        A += __ldcg(pr + c * (DV + 2) + 2 + d) * e;
    }
    *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = L > 0.f ? A / L : 0.f;
}

template <int D, int DV, int RB, typename TK, typename TV> __device__ void fa_vec_k(const FaArgs& a) {
    static_assert(D == DV, "fa_vec_k: a lane takes the same 8 elements of q, K and V");
    constexpr int L = D / 8, KPI = 32 / L;                  // lanes of a key, keys a warp reads at once
    constexpr int NB = (RB == 8 ? 2 : 8) / (sizeof(TK) == 4 || sizeof(TV) == 4 ? 2 : 1);    // keys a lane per pass
    constexpr int G = FA_WARPS * KPI;                       // keys a block takes one per lane group
    __shared__ float wm[FA_WARPS][RB], wl[FA_WARPS][RB];
    __shared__ __align__(16) float wacc[FA_WARPS][RB][DV];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % L, slot = lane / L;
    const int group = a.h / a.hk, g = blockIdx.y % a.hk, i3 = blockIdx.y / a.hk;
    const int p0 = blockIdx.z * RB, np = min(RB, group * a.n - p0);     // pairs p: head g group + p % group, row p / group
    const char* kb = a.k + g * a.ks[1] + (i3 / a.sr) * a.ks[2];
    const char* vb = a.v + g * a.vs[1] + (i3 / a.sr) * a.vs[2];
    const float qscale = a.softcap > 0.f ? a.scale / a.softcap : a.scale;
    const char* mrow[RB];
    float q[RB][8], slope[RB], m[RB], l[RB], acc[RB][8];
    #pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int p = p0 + r, hq = g * group + p % group;
        const char* qr = a.q + (p / group) * a.qs[0] + hq * a.qs[1] + i3 * a.qs[2] + sub * 32;
        #pragma unroll
        for (int i = 0; i < 8; ++i) q[r][i] = r < np ? *(const float*)(qr + 4 * i) : 0.f;     // scaled in the scores
        mrow[r] = a.mask && r < np ? a.mask + (p / group) * a.ms[0] + (hq % a.mh) * a.ms[1] + (i3 % a.mw) * a.ms[2] : 0;
        slope[r] = a.m0 == 1.f && a.m1 == 1.f ? 1.f : fa_slope(a, hq);      // no ALiBi: no powf
        m[r] = NEG; l[r] = 0.f;
        #pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][i] = 0.f;
    }
    const int c0 = blockIdx.x * a.chunk, c1 = min(a.nkv, c0 + a.chunk);
    for (int t0 = c0; t0 < c1; t0 += NB * G) {              // a pass: every load first, then the math
        const int nt = min(NB, (c1 - t0 + G - 1) / G), j0 = t0 + warp * KPI + slot;
        FaLd<TK> kr[NB];
        FaLd<TV> vr[NB];
        float x[RB][NB];                                    // the mask's bits, then the scores, then P
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            const int j = j0 + t * G;
            kr[t] = FaLd<TK>{}; vr[t] = FaLd<TV>{};
            if (t < nt && j < c1) {
                kr[t].load(kb + (i64)j * a.ks[0], sub);
                vr[t].load(vb + (i64)j * a.vs[0], sub);
            }
            #pragma unroll
            for (int r = 0; r < RB; ++r) {                  // no use before every load is issued
                unsigned b = 0u;
                if (t < nt && j < c1 && mrow[r])
                    b = a.mask_f16 ? *(const unsigned short*)(mrow[r] + 2 * j) : *(const unsigned*)(mrow[r] + 4 * j);
                x[r][t] = __uint_as_float(b);
            }
        }
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            const bool valid = t < nt && j0 + t * G < c1;
            if (t < nt) {
                float kx[8];
                kr[t].get(kx);
                #pragma unroll
                for (int r = 0; r < RB; ++r) {
                    float s = 0.f;
                    #pragma unroll
                    for (int i = 0; i < 8; ++i) s = fmaf(q[r][i], kx[i], s);
                    #pragma unroll
                    for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                    s *= qscale;
                    if (a.softcap > 0.f) s = a.softcap * tanhf(s);
                    const float mv = a.mask_f16 ? to_f((half_t)__float_as_uint(x[r][t])) : x[r][t];
                    x[r][t] = valid && r < np ? s + slope[r] * mv : NEG;
                }
            } else {
                #pragma unroll
                for (int r = 0; r < RB; ++r) x[r][t] = NEG;
            }
        }
        #pragma unroll
        for (int r = 0; r < RB; ++r) {                      // online softmax of the lane group's keys
            float mx = m[r];
            #pragma unroll
            for (int t = 0; t < NB; ++t) mx = fmaxf(mx, x[r][t]);
            const float c = m[r] == NEG ? 0.f : __expf(m[r] - mx);
            l[r] *= c;
            #pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] *= c;
            m[r] = mx;
            #pragma unroll
            for (int t = 0; t < NB; ++t) {
                x[r][t] = x[r][t] == NEG ? 0.f : __expf(x[r][t] - mx);
                l[r] += x[r][t];
            }
        }
        #pragma unroll
        for (int t = 0; t < NB; ++t) {
            if (t < nt) {
                float vx[8];
                vr[t].get(vx);
                #pragma unroll
                for (int r = 0; r < RB; ++r)
                    #pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(x[r][t], vx[i], acc[r][i]);
            }
        }
    }
    #pragma unroll
    for (int o = L; o < 32; o <<= 1) {                      // the warp's lane groups merged
        #pragma unroll
        for (int r = 0; r < RB; ++r) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[r], o), lo = __shfl_xor_sync(0xffffffffu, l[r], o);
            const float mn = fmaxf(m[r], mo);
            const float c = m[r] == NEG ? 0.f : __expf(m[r] - mn), co = mo == NEG ? 0.f : __expf(mo - mn);
            l[r] = l[r] * c + lo * co;
            #pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] = acc[r][i] * c + __shfl_xor_sync(0xffffffffu, acc[r][i], o) * co;
            m[r] = mn;
        }
    }
    if (lane < L) {
        #pragma unroll
        for (int r = 0; r < RB; ++r) {
            if (lane == 0) { wm[warp][r] = m[r]; wl[warp][r] = l[r]; }
            *(float4*)&wacc[warp][r][sub * 8] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            *(float4*)&wacc[warp][r][sub * 8 + 4] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < np * DV; t += blockDim.x) {       // the warps merged
        const int r = t / DV, d = t % DV, p = p0 + r, hq = g * group + p % group, i1 = p / group;
        float M = NEG, S = 0.f, A = 0.f;
        #pragma unroll
        for (int w = 0; w < FA_WARPS; ++w) M = fmaxf(M, wm[w][r]);
        #pragma unroll
        for (int w = 0; w < FA_WARPS; ++w) {
            const float c = wm[w][r] == NEG ? 0.f : __expf(wm[w][r] - M);
            S += wl[w][r] * c;
            A += wacc[w][r][d] * c;
        }
        if (a.nchunks == 1) {
            *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = S > 0.f ? A / S : 0.f;
        } else {
            float* pr = a.part + (((i64)(i3 * a.n + i1) * a.h + hq) * a.nchunks + blockIdx.x) * (DV + 2);
            if (d == 0) { pr[0] = M; pr[1] = S; }
            pr[2 + d] = A;
        }
    }
    if (a.nchunks == 1 || !a.count) return;
    __shared__ bool last;                                       // the chunks' last block merges their partials
    __syncthreads();                                            // the block's partials written
    if (threadIdx.x == 0) {             // one acq_rel add: releases them, acquires the other blocks' (no SC fence)
        int* c = a.count + blockIdx.y * gridDim.z + blockIdx.z;
        int old;
        asm volatile("atom.acq_rel.gpu.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
        last = old == a.nchunks - 1;
        if (last) *c = 0;                                       // every block of these pairs has counted
    }
    __syncthreads();
    if (!last) return;
    for (int t = threadIdx.x; t < np * DV / 2; t += blockDim.x) {   // two elements a thread, every load at once
        const int r = t / (DV / 2), d = t % (DV / 2) * 2, p = p0 + r, hq = g * group + p % group, i1 = p / group;
        const float* pr = a.part + ((i64)(i3 * a.n + i1) * a.h + hq) * a.nchunks * (DV + 2);
        float mc[FA_MAXC], lc[FA_MAXC], M = NEG, S = 0.f;
        float2 ac[FA_MAXC], A = make_float2(0.f, 0.f);
        #pragma unroll
        for (int c = 0; c < FA_MAXC; ++c) {
            const bool on = c < a.nchunks;
            mc[c] = on ? __ldcg(pr + c * (DV + 2)) : NEG;
            lc[c] = on ? __ldcg(pr + c * (DV + 2) + 1) : 0.f;
            ac[c] = on ? __ldcg((const float2*)(pr + c * (DV + 2) + 2 + d)) : make_float2(0.f, 0.f);
        }
        #pragma unroll
        for (int c = 0; c < FA_MAXC; ++c) M = fmaxf(M, mc[c]);
        #pragma unroll
        for (int c = 0; c < FA_MAXC; ++c) {
            const float e = mc[c] == NEG ? 0.f : expf(mc[c] - M);       // as fa_combine_row, to the bit
            S += lc[c] * e; A.x += ac[c].x * e; A.y += ac[c].y * e;
        }
        *(float2*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) =
            S > 0.f ? make_float2(A.x / S, A.y / S) : make_float2(0.f, 0.f);
    }
}

template <int DV> __device__ void fa_combine_k(const FaArgs& a) {
    for (int d = threadIdx.x; d < DV; d += blockDim.x) fa_combine_row<DV>(a, blockIdx.x, d);
}
