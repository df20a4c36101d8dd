// flash_attn_ext for prompt chunks on tensor cores (kernels/attention_flash.py's `tc`), FlashAttention-2 style:
// fa_mma_k: a block of FA_MMA_WARPS warps takes 16 (query head, row) pairs a warp of one KV head's group (the
//   group's heads share every K / V tile) and one chunk of the keys (blockIdx.x = pair block * nchunks + chunk);
//   K and V tiles of FA_MMA_KC keys (32 for heads of 256) go to shared memory as F16 (F16 by cp.async, the next K
//   tile loading during the softmax and P.V, the next V tile during the scores; Q8_0 dequantized and rounded), read
//   by ldmatrix (V transposed) into
//   mma.sync m16n8k16 (F32 accumulation); q (scaled, in log2 units) and P rounded to F16; the mask tile to F16 in
//   shared memory (the next tile's rows prefetched to L1); the online softmax in registers with exp2; a block skips a
//   tile its mask hides entirely. One chunk writes dst, several write (max, sum, accumulator) partials to the temp
//   block (fa_vec_k's layout), merged by fa_combine_k.
// A row whose scores are all -inf gives zeros (as the CPU kernel).
#pragma once
#include "attention_flash.cuh"

#define FA_MMA_WARPS 4
#define FA_MMA_KC 64            // keys per tile (32 for heads of 256: K, V and mask tiles in 48 KB of shared)

// rows j0 .. j0 + KC - 1 of K or V (rows from kc on zeroed) into sh (row stride P halves); v16: 16-byte aligned rows
template <int D, int KC, int P, typename T> struct FaTile {
    static __device__ __forceinline__ void load(half_t* sh, const char* base, i64 stride, int j0, int kc, bool v16) {
        if (v16) {
            for (int c = threadIdx.x; c < KC * D / 8; c += FA_MMA_WARPS * 32) {
                const int j = c / (D / 8), d = c % (D / 8) * 8;
                cp_async16(sh + j * P + d, base + (j < kc ? (i64)(j0 + j) * stride + d * 2 : 0), j < kc ? 16 : 0);
            }
        } else {
            for (int c = threadIdx.x; c < KC * D / 4; c += FA_MMA_WARPS * 32) {
                const int j = c / (D / 4), d = c % (D / 4) * 4;
                cp_async8(sh + j * P + d, base + (j < kc ? (i64)(j0 + j) * stride + d * 2 : 0), j < kc ? 8 : 0);
            }
        }
    }
};
template <int D, int KC, int P> struct FaTile<D, KC, P, q8_0_t> {
    static __device__ __forceinline__ void load(half_t* sh, const char* base, i64 stride, int j0, int kc, bool) {
        for (int c = threadIdx.x; c < KC * D / 8; c += FA_MMA_WARPS * 32) {
            const int j = c / (D / 8), d = c % (D / 8) * 8;
            uint4 u = make_uint4(0u, 0u, 0u, 0u);
            if (j < kc) {
                const char* b = base + (i64)(j0 + j) * stride + (d >> 5) * 34;
                const float s = to_f(*(const half_t*)b);
                const signed char* x = (const signed char*)b + 2 + (d & 31);
                u = make_uint4(h2_f16(s * x[0], s * x[1]), h2_f16(s * x[2], s * x[3]), h2_f16(s * x[4], s * x[5]),
                               h2_f16(s * x[6], s * x[7]));
            }
            *(uint4*)(sh + j * P + d) = u;
        }
    }
};

// the mask at keys j0 .. j0 + KC - 1 of the block's pairs pb0 .. pb0 + 63 as F16 into Ms (-inf past c1 and for
// pairs past the last); whether this thread stored a finite value. A thread's KC / 8 quads of keys (pairs
// tid / (KC / 4) + 512 t / KC, keys 4 (tid % (KC / 4)) ..: 16-byte F32 / 8-byte F16 loads where mvec) are all loaded
// before any is stored.
template <int KC> __device__ __forceinline__ bool fa_mask_tile(const FaArgs& a, half_t (*Ms)[KC + 8], int pb0, int kh,
                                                               int i3, int j0, int c1, bool mvec) {
    constexpr int T = 16 * KC / 4 / 32;
    const float NEG = __int_as_float(0xff800000);
    const int group = a.h / a.hk, j = j0 + threadIdx.x % (KC / 4) * 4;
    float4 x[T];
    #pragma unroll
    for (int t = 0; t < T; ++t) {
        const int p = pb0 + threadIdx.x / (KC / 4) + t * (FA_MMA_WARPS * 32) / (KC / 4);
        x[t] = make_float4(NEG, NEG, NEG, NEG);
        if (p >= group * a.n) continue;
        const char* mr = a.mask ? a.mask + (p / group) * a.ms[0] + ((kh * group + p % group) % a.mh) * a.ms[1] +
                                  (i3 % a.mw) * a.ms[2] : 0;
        if (mr && mvec && j + 3 < c1) {
            x[t] = a.mask_f16 ? load4<half_t>(mr + j * 2) : *(const float4*)(mr + j * 4);
        } else {
            float* v = (float*)&x[t];
            #pragma unroll
            for (int e = 0; e < 4; ++e)
                if (j + e < c1) v[e] = mr ? fa_mask(a, mr, j + e) : 0.f;
        }
    }
    bool any = false;
    #pragma unroll
    for (int t = 0; t < T; ++t) {
        const uint2 u = make_uint2(h2_f16(x[t].x, x[t].y), h2_f16(x[t].z, x[t].w));
        *(uint2*)&Ms[threadIdx.x / (KC / 4) + t * (FA_MMA_WARPS * 32) / (KC / 4)][j - j0] = u;
        any |= u.x != 0xfc00fc00u || u.y != 0xfc00fc00u;
    }
    return any;
}
// the mask rows of the tile at j0 pulled towards L1 (a 128-byte line a thread) while this tile is computed
__device__ __forceinline__ void fa_mask_prefetch(const FaArgs& a, int pb0, int kh, int i3, int j0, int c1) {
    const int group = a.h / a.hk, p = pb0 + (threadIdx.x >> 1);
    const int j = min(j0 + (threadIdx.x & 1) * (a.mask_f16 ? 64 : 32), c1 - 1);
    if (a.mask && p < group * a.n && j0 < c1) {
        const char* mr = a.mask + (p / group) * a.ms[0] + ((kh * group + p % group) % a.mh) * a.ms[1] +
                         (i3 % a.mw) * a.ms[2] + j * (a.mask_f16 ? 2 : 4);
        asm volatile("prefetch.global.L1 [%0];" :: "l"(mr));
    }
}
__device__ __forceinline__ float fa_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }

// [c0, c1) narrowed to the keys from the first (rounded down to KC) to the last that the mask leaves finite for the
// block's pairs (one mask row for the heads of a query row where the mask has one head); c0 >= c1 where none is.
// 16-byte loads where the mask's rows are so aligned.
template <int KC> __device__ void fa_mma_live(const FaArgs& a, int pb0, int kh, int i3, int& c0, int& c1) {
    __shared__ int slo, shi;
    const float NEG = __int_as_float(0xff800000);
    const int group = a.h / a.hk, np = min(FA_MMA_WARPS * 16, group * a.n - pb0), r0 = pb0 / group;
    const bool one = a.mh == 1;
    const int nr = one ? (pb0 + np - 1) / group - r0 + 1 : np, per = a.mask_f16 ? 8 : 4, nv = (c1 - c0 + per - 1) / per;
    const bool vec = ((unsigned long long)a.mask | a.ms[0] | a.ms[1] | a.ms[2]) % 16 == 0;
    if (threadIdx.x == 0) { slo = c1; shi = c0; }
    __syncthreads();
    int tlo = c1, thi = c0;
    for (int e = threadIdx.x; e < nr * nv; e += blockDim.x) {
        const int i = e / nv, j = c0 + e % nv * per, p = pb0 + i;
        const char* mr = a.mask + (one ? r0 + i : p / group) * a.ms[0] + (i3 % a.mw) * a.ms[2] +
                         (one ? 0 : (kh * group + p % group) % a.mh) * a.ms[1];
        float x[8];
        if (vec && j + per <= c1) {
            const uint4 u = *(const uint4*)(mr + j * (a.mask_f16 ? 2 : 4));
            const unsigned w[4] = {u.x, u.y, u.z, u.w};
            #pragma unroll
            for (int k = 0; k < 8; ++k)
                x[k] = a.mask_f16 ? to_f((half_t)(w[k >> 1] >> (16 * (k & 1)))) : k < 4 ? __uint_as_float(w[k]) : NEG;
        } else {
            #pragma unroll
            for (int k = 0; k < 8; ++k) x[k] = k < per && j + k < c1 ? fa_mask(a, mr, j + k) : NEG;
        }
        #pragma unroll
        for (int k = 0; k < 8; ++k)
            if (x[k] != NEG) { tlo = min(tlo, j + k); thi = max(thi, j + k + 1); }
    }
    tlo = __reduce_min_sync(0xffffffffu, tlo); thi = __reduce_max_sync(0xffffffffu, thi);
    if ((threadIdx.x & 31) == 0) { atomicMin(&slo, tlo); atomicMax(&shi, thi); }
    __syncthreads();
    c0 = max(c0, slo / KC * KC); c1 = shi;
}

template <int D, typename TK, typename TV, int KC = FA_MMA_KC> __device__ void fa_mma_k(const FaArgs& a) {
    constexpr int P = D + 8;                  // row padding (halves): ldmatrix without bank conflicts
    constexpr float LOG2E = 1.4426950408889634f;
    __shared__ __align__(16) half_t Ks[KC * P];
    __shared__ __align__(16) half_t Vs[KC * P];
    __shared__ __align__(16) half_t Ms[FA_MMA_WARPS * 16][KC + 8];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int group = a.h / a.hk, npair = group * a.n, kh = blockIdx.y, i3 = blockIdx.z;
    const int chunk = blockIdx.x % a.nchunks, pb0 = blockIdx.x / a.nchunks * FA_MMA_WARPS * 16, p0 = pb0 + warp * 16;
    const char* kb = a.k + kh * a.ks[1] + (i3 / a.sr) * a.ks[2];
    const char* vb = a.v + kh * a.vs[1] + (i3 / a.sr) * a.vs[2];
    const bool v16 = (((unsigned long long)kb | (unsigned long long)vb | a.ks[0] | a.vs[0]) & 15) == 0;
    const bool mvec = ((unsigned long long)a.mask | a.ms[0] | a.ms[1] | a.ms[2]) % (a.mask_f16 ? 8 : 16) == 0;
    const float qscale = a.softcap > 0.f ? a.scale / a.softcap : a.scale * LOG2E;
    int row[2], head[2];                                      // this lane's pairs p0 + g and p0 + g + 8
    float slope[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int p = p0 + g + 8 * i;
        row[i] = p < npair ? p / group : -1;
        head[i] = kh * group + p % group;
        slope[i] = fa_slope(a, head[i]) * LOG2E;
    }
    unsigned qa[D / 16][4];                                   // A fragments of the scaled q (16 pairs x D)
    #pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int i = r & 1, col = ks * 16 + t4 * 2 + (r >> 1) * 8;
            float2 x = make_float2(0.f, 0.f);
            if (row[i] >= 0) x = *(const float2*)(a.q + row[i] * a.qs[0] + head[i] * a.qs[1] + i3 * a.qs[2] + col * 4);
            qa[ks][r] = h2_f16(x.x * qscale, x.y * qscale);
        }
    float o[D / 8][4], m[2] = {NEG, NEG}, l[2] = {0.f, 0.f};
    #pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    int c0 = chunk * a.chunk, c1 = min(a.nkv, c0 + a.chunk);
    if constexpr (D == 256) {                                 // only the chunk's live keys (a sliding window's)
        if (a.mask) fa_mma_live<KC>(a, pb0, kh, i3, c0, c1);
    }
    FaTile<D, KC, P, TK>::load(Ks, kb, a.ks[0], c0, c1 - c0, v16);
    cp_commit();
    FaTile<D, KC, P, TV>::load(Vs, vb, a.vs[0], c0, c1 - c0, v16);
    cp_commit();
    for (int j0 = c0; j0 < c1; j0 += KC) {
        const bool any = fa_mask_tile<KC>(a, Ms, pb0, kh, i3, j0, c1, mvec);
        fa_mask_prefetch(a, pb0, kh, i3, j0 + KC, c1);
        cp_wait1();                                           // K's tile (V's may still be loading)
        const bool live = __syncthreads_or(any) && p0 < npair;    // else nothing of the tile for this warp
        float s[KC / 8][4];
        if (live) {
            #pragma unroll
            for (int nb = 0; nb < KC / 8; ++nb) {
                s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
                #pragma unroll
                for (int ks = 0; ks < D / 16; ks += 2) {
                    unsigned b[4];
                    ldsm4(b, Ks + (nb * 8 + (lane & 7)) * P + ks * 16 + (lane >> 3) * 8);
                    mma16816<half_t>(s[nb], qa[ks], b);
                    mma16816<half_t>(s[nb], qa[ks + 1], b + 2);
                }
            }
        }
        __syncthreads();                                      // K's tile read by every warp: load the next one
        if (j0 + KC < c1) FaTile<D, KC, P, TK>::load(Ks, kb, a.ks[0], j0 + KC, c1 - j0 - KC, v16);
        cp_commit();
        unsigned pa[KC / 16][4];                              // P as A fragments
        if (live) {
            float cmax[2] = {NEG, NEG};
            #pragma unroll
            for (int nb = 0; nb < KC / 8; ++nb)
                #pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = r >> 1;
                    const unsigned m2 = *(const unsigned*)&Ms[warp * 16 + g + 8 * i][nb * 8 + t4 * 2];
                    const half_t mh = (half_t)(m2 >> (16 * (r & 1)));
                    float v = a.softcap > 0.f ? a.softcap * LOG2E * tanhf(s[nb][r]) : s[nb][r];
                    v = mh == 0xfc00u ? NEG : v + slope[i] * to_f(mh);
                    s[nb][r] = v;
                    cmax[i] = fmaxf(cmax[i], v);
                }
            #pragma unroll
            for (int i = 0; i < 2; ++i) {
                cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 1));
                cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 2));
                const float mn = fmaxf(m[i], cmax[i]);
                const float c = mn == NEG ? 1.f : fa_exp2(m[i] - mn);
                m[i] = mn;
                cmax[i] = mn == NEG ? 0.f : mn;                   // the exponent's offset
                l[i] *= c;
                #pragma unroll
                for (int nd = 0; nd < D / 8; ++nd) { o[nd][2 * i] *= c; o[nd][2 * i + 1] *= c; }
            }
            #pragma unroll
            for (int nb = 0; nb < KC / 8; ++nb)
                #pragma unroll
                for (int r = 0; r < 4; ++r) {
                    s[nb][r] = fa_exp2(s[nb][r] - cmax[r >> 1]);
                    l[r >> 1] += s[nb][r];
                }
            #pragma unroll
            for (int kk = 0; kk < KC / 16; ++kk) {
                pa[kk][0] = h2_f16(s[2 * kk][0], s[2 * kk][1]);
                pa[kk][1] = h2_f16(s[2 * kk][2], s[2 * kk][3]);
                pa[kk][2] = h2_f16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[kk][3] = h2_f16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }
        }
        cp_wait1();                                           // V's tile (the next K's may still be loading)
        __syncthreads();
        if (live) {
            #pragma unroll
            for (int kk = 0; kk < KC / 16; ++kk)
                #pragma unroll
                for (int nd = 0; nd < D / 8; nd += 2) {
                    unsigned b[4];
                    ldsm4t(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + (nd + (lane >> 4)) * 8);
                    mma16816<half_t>(o[nd], pa[kk], b);
                    mma16816<half_t>(o[nd + 1], pa[kk], b + 2);
                }
        }
        __syncthreads();                                      // V's tile and the mask read: load the next ones
        if (j0 + KC < c1) FaTile<D, KC, P, TV>::load(Vs, vb, a.vs[0], j0 + KC, c1 - j0 - KC, v16);
        cp_commit();
    }
    cp_wait_all();                                            // no copy outlives the block (an empty chunk's)
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (row[i] < 0) continue;
        float* out;
        float inv = 1.f;
        if (a.nchunks == 1) {
            out = (float*)(a.dst + head[i] * a.ds[0] + row[i] * a.ds[1] + i3 * a.ds[2]);
            inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        } else {                                              // the partial: max (natural log units), sum, accumulator
            out = a.part + (((i64)(i3 * a.n + row[i]) * a.h + head[i]) * a.nchunks + chunk) * (D + 2);
            if (t4 == 0) { out[0] = m[i] == NEG ? NEG : m[i] * 0.6931471805599453f; out[1] = l[i]; }
            out += 2;
        }
        #pragma unroll
        for (int nd = 0; nd < D / 8; ++nd)
            *(float2*)(out + nd * 8 + t4 * 2) = make_float2(o[nd][2 * i] * inv, o[nd][2 * i + 1] * inv);
    }
}
