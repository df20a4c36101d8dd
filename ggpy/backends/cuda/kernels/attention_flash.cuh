// flash_attn_ext (kernels/attention_flash.py): FaArgs (twin of the ctypes struct) and the kernels of few query rows
// (prompt chunks: attention_fa_mma.cuh).
// fa_vec_k: few query rows (a generated token), the keys split in chunks over blockIdx.x; a block takes one chunk of
//   one KV head for RB (query head, row) pairs of its group (blockIdx.z the pairs, blockIdx.y KV head and sequence);
//   each warp takes 32 keys at a time, a lane a key for the scores (q in shared memory), then the lanes split Dv for
//   P.V; an online softmax per warp, the warps merged at the end; one chunk writes dst, several write their partial
//   (max, sum, accumulator) in the temp block, merged by the last block of the pairs to arrive (a.count) or else by
//   fa_combine_k. F32 math on F32, F16 or Q8_0 K and V.
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

struct q8_0_t {};               // K / V rows of Q8_0 blocks: f16 d, 32 int8 (34 bytes)
template <typename T> struct FaRow {
    static __device__ __forceinline__ float4 at4(const char* r, int d) { return load4<T>(r + d * (int)sizeof(T)); }
    static __device__ __forceinline__ float at(const char* r, int d) { return to_f(*(const T*)(r + d * (int)sizeof(T))); }
};
template <> struct FaRow<q8_0_t> {
    static __device__ __forceinline__ float4 at4(const char* r, int d) {
        const char* b = r + (d >> 5) * 34;
        const float s = to_f(*(const half_t*)b);
        const signed char* x = (const signed char*)b + 2 + (d & 31);
        return make_float4(s * x[0], s * x[1], s * x[2], s * x[3]);
    }
    static __device__ __forceinline__ float at(const char* r, int d) {
        const char* b = r + (d >> 5) * 34;
        return to_f(*(const half_t*)b) * ((const signed char*)b)[2 + (d & 31)];
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
    constexpr int E = (DV + 31) / 32;                       // a lane's values of a V row: lane + 32 e
    __shared__ __align__(16) float qsh[RB][D];
    __shared__ float psh[FA_WARPS][RB][32];
    __shared__ float wm[FA_WARPS][RB], wl[FA_WARPS][RB];
    __shared__ float wacc[FA_WARPS][RB][DV];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = a.h / a.hk, g = blockIdx.y % a.hk, i3 = blockIdx.y / a.hk;
    const int p0 = blockIdx.z * RB, np = min(RB, group * a.n - p0);     // pairs p: head g group + p % group, row p / group
    const char* kb = a.k + g * a.ks[1] + (i3 / a.sr) * a.ks[2];
    const char* vb = a.v + g * a.vs[1] + (i3 / a.sr) * a.vs[2];
    const float qscale = a.softcap > 0.f ? a.scale / a.softcap : a.scale;
    for (int t = threadIdx.x; t < RB * D; t += blockDim.x) {
        const int r = t / D, d = t % D, p = p0 + r;
        float x = 0.f;
        if (r < np)
            x = *(const float*)(a.q + (p / group) * a.qs[0] + (g * group + p % group) * a.qs[1] + i3 * a.qs[2] + d * 4);
        qsh[r][d] = x * qscale;
    }
    const char* mrow[RB];
    float slope[RB], m[RB], l[RB], acc[RB][E];
    #pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int p = p0 + r, hq = g * group + p % group;
        mrow[r] = a.mask && r < np ? a.mask + (p / group) * a.ms[0] + (hq % a.mh) * a.ms[1] + (i3 % a.mw) * a.ms[2] : 0;
        slope[r] = fa_slope(a, hq);
        m[r] = NEG; l[r] = 0.f;
        #pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = 0.f;
    }
    __syncthreads();
    const int c0 = blockIdx.x * a.chunk, c1 = min(a.nkv, c0 + a.chunk);
    for (int t0 = c0 + warp * 32; t0 < c1; t0 += FA_WARPS * 32) {
        const int j = t0 + lane;
        const bool valid = j < c1;
        float s[RB];
        #pragma unroll
        for (int r = 0; r < RB; ++r) s[r] = 0.f;
        if (valid) {
            const char* kr = kb + (i64)j * a.ks[0];
            #pragma unroll 8
            for (int d = 0; d < D; d += 4) {
                const float4 k4 = FaRow<TK>::at4(kr, d);
                #pragma unroll
                for (int r = 0; r < RB; ++r) {
                    const float4 q4 = *(const float4*)&qsh[r][d];
                    s[r] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
                }
            }
        }
        #pragma unroll
        for (int r = 0; r < RB; ++r) {
            float x = NEG;
            if (valid && r < np) {
                x = a.softcap > 0.f ? a.softcap * tanhf(s[r]) : s[r];
                if (mrow[r]) x += slope[r] * fa_mask(a, mrow[r], j);
            }
            const float mn = fmaxf(m[r], fa_warp_max(x));
            const float c = m[r] == NEG ? 0.f : expf(m[r] - mn);
            const float p = x == NEG ? 0.f : expf(x - mn);
            l[r] = l[r] * c + p;
            #pragma unroll
            for (int e = 0; e < E; ++e) acc[r][e] *= c;
            m[r] = mn;
            psh[warp][r][lane] = p;
        }
        __syncwarp();
        const int nj = min(32, c1 - t0);
        for (int jj = 0; jj < nj; ++jj) {
            const char* vr = vb + (i64)(t0 + jj) * a.vs[0];
            float vv[E];
            #pragma unroll
            for (int e = 0; e < E; ++e) vv[e] = lane + 32 * e < DV ? FaRow<TV>::at(vr, lane + 32 * e) : 0.f;
            #pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float p = psh[warp][r][jj];
                #pragma unroll
                for (int e = 0; e < E; ++e) acc[r][e] += p * vv[e];
            }
        }
        __syncwarp();
    }
    #pragma unroll
    for (int r = 0; r < RB; ++r) {
        const float lr = fa_warp_sum(l[r]);
        if (lane == 0) { wm[warp][r] = m[r]; wl[warp][r] = lr; }
        #pragma unroll
        for (int e = 0; e < E; ++e)
            if (lane + 32 * e < DV) wacc[warp][r][lane + 32 * e] = acc[r][e];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < np * DV; t += blockDim.x) {       // the warps merged
        const int r = t / DV, d = t % DV, p = p0 + r, hq = g * group + p % group, i1 = p / group;
        float M = NEG, L = 0.f, A = 0.f;
        #pragma unroll
        for (int w = 0; w < FA_WARPS; ++w) M = fmaxf(M, wm[w][r]);
        #pragma unroll
        for (int w = 0; w < FA_WARPS; ++w) {
            const float c = wm[w][r] == NEG ? 0.f : expf(wm[w][r] - M);
            L += wl[w][r] * c;
            A += wacc[w][r][d] * c;
        }
        if (a.nchunks == 1) {
            *(float*)(a.dst + hq * a.ds[0] + i1 * a.ds[1] + i3 * a.ds[2] + d * 4) = L > 0.f ? A / L : 0.f;
        } else {
            float* pr = a.part + (((i64)(i3 * a.n + i1) * a.h + hq) * a.nchunks + blockIdx.x) * (DV + 2);
            if (d == 0) { pr[0] = M; pr[1] = L; }
            pr[2 + d] = A;
        }
    }
    if (a.nchunks == 1 || !a.count) return;
    __shared__ bool last;                                       // the chunks' last block merges their partials
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int* c = a.count + blockIdx.y * gridDim.z + blockIdx.z;
        last = atomicAdd(c, 1) == a.nchunks - 1;
        if (last) *c = 0;                                       // every block of these pairs has counted
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int t = threadIdx.x; t < np * DV; t += blockDim.x) {
        const int p = p0 + t / DV, i1 = p / group;
        fa_combine_row<DV>(a, ((i64)i3 * a.n + i1) * a.h + g * group + p % group, t % DV);
    }
}

template <int DV> __device__ void fa_combine_k(const FaArgs& a) {
    for (int d = threadIdx.x; d < DV; d += blockDim.x) fa_combine_row<DV>(a, blockIdx.x, d);
}
