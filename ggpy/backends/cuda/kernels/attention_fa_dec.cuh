// flash_attn_ext for a generated token on tensor cores (kernels/attention_flash.py's `dec`): F16 K and V, few query rows.
// fa_dec_k: a block of FA_DEC_WARPS warps takes up to 8 (query head, row) pairs of one KV head's group (blockIdx.z the
//   pair blocks, blockIdx.y KV head and sequence: the group's heads share every key) and a chunk of the keys (blockIdx.x),
//   a.chunk / FA_DEC_WARPS keys a warp (rounded up) in steps of 16. No shared memory on the way: a lane loads its own fragments
//   straight from the cache in 16-byte loads, the feature order of q.K
//   permuted so that a lane's part of a key row is contiguous (lane t: features D/4 t .. D/4 (t + 1)), and P.V's output
//   columns so that a lane's part of a V row is (lane g: features D/8 g ..); the scores' accumulators are P's A fragments
//   (FlashAttention-2's layout); mma.sync m16n8k16, F32 accumulation, q and P rounded to F16 (as `tc`), the online
//   softmax in log2 units. The warps, then the chunks merge as fa_vec_k's (fa_finish): CL = FA_CL chunks as a cluster
//   through their shared memory (sm_90 on, few keys), else through memory. A row whose scores are all -inf gives zeros.
#pragma once
#include "attention_fa_mma.cuh"

#define FA_DEC_WARPS 8          // attention_flash.py DEC_WARPS
#define FA_DEC_RB 8             // pairs a block (the MMA's rows 0..7; attention_flash.py DEC_ROWS)

// one step of a lane: K rows j0 + g and j0 + 8 + g (its D / 4 features), V rows j0 + 2t, + 1, + 8, + 9 (its D / 8), and
// the mask at the keys of its scores (j0 + 2t, + 1, + 8, + 9) for its pair
template <int D> struct FaDecStep {
    uint4 k[2][D / 32], v[4][D / 64];
    float mk[4];
    __device__ __forceinline__ void load(const FaArgs& a, const char* kb, const char* vb, const char* mrow, int j0,
                                         int w1, int g, int t) {
        #pragma unroll
        for (int kt = 0; kt < 2; ++kt) {
            const int j = j0 + 8 * kt + g;
            const uint4* r = (const uint4*)(kb + (i64)j * a.ks[0] + t * (D / 2));
            #pragma unroll
            for (int i = 0; i < D / 32; ++i) k[kt][i] = j < w1 ? r[i] : make_uint4(0u, 0u, 0u, 0u);
        }
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + 2 * t + (e & 1) + 8 * (e >> 1);
            const uint4* r = (const uint4*)(vb + (i64)j * a.vs[0] + g * (D / 4));
            #pragma unroll
            for (int i = 0; i < D / 64; ++i) v[e][i] = j < w1 ? r[i] : make_uint4(0u, 0u, 0u, 0u);
            mk[e] = j >= w1 ? __int_as_float(0xff800000) : mrow ? fa_mask(a, mrow, j) : 0.f;
        }
    }
};
__device__ __forceinline__ unsigned fa_word(const uint4* u, int w) {     // 32-bit word w of u[0], u[1], ..
    const uint4 x = u[w >> 2];
    return (w & 3) == 0 ? x.x : (w & 3) == 1 ? x.y : (w & 3) == 2 ? x.z : x.w;
}

template <int D, int CL> __device__ void fa_dec_k(const FaArgs& a) {
    constexpr int W = FA_DEC_WARPS, RB = FA_DEC_RB, NS = D / 16, NT = D / 8;
    constexpr float LOG2E = 1.4426950408889634f;
    __shared__ float wm[W][RB], wl[W][RB];
    __shared__ __align__(16) float wacc[W][RB][D];
    fa_cluster_start<W, RB, D, CL>();
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int group = a.h / a.hk, kh = blockIdx.y % a.hk, i3 = blockIdx.y / a.hk;
    const int p0 = blockIdx.z * RB, np = min(RB, group * a.n - p0), p = p0 + g;     // this lane's pair (g < np)
    const int hq = kh * group + p % group, i1 = p / group;
    const char* kb = a.k + kh * a.ks[1] + (i3 / a.sr) * a.ks[2];
    const char* vb = a.v + kh * a.vs[1] + (i3 / a.sr) * a.vs[2];
    const int c1 = min(a.nkv, (int)(blockIdx.x + 1) * a.chunk), kw = (a.chunk + W - 1) / W;
    const int w0 = blockIdx.x * a.chunk + warp * kw, w1 = min(c1, w0 + kw);
    fa_prefetch_wait(kb, a.ks[0], 2 * D, vb, a.vs[0], 2 * D, blockIdx.x * a.chunk, c1);
    const char* mrow = a.mask && g < np ? a.mask + i1 * a.ms[0] + (hq % a.mh) * a.ms[1] + (i3 % a.mw) * a.ms[2] : 0;
    const float qscale = a.softcap > 0.f ? a.scale / a.softcap : a.scale * LOG2E;
    const float slope = (a.m0 == 1.f && a.m1 == 1.f ? 1.f : fa_slope(a, hq)) * LOG2E;
    unsigned qa[NS][4];                 // A fragments: k 2t + e of step s is feature D/4 t + 4 s + e, 2t + 8 + e + 2
    {
        float x[D / 4];
        const float* qr = (const float*)(a.q + i1 * a.qs[0] + hq * a.qs[1] + i3 * a.qs[2]) + t * (D / 4);
        #pragma unroll
        for (int i = 0; i < D / 4; ++i) x[i] = g < np ? qr[i] * qscale : 0.f;
        #pragma unroll
        for (int s = 0; s < NS; ++s) {
            qa[s][0] = h2_f16(x[4 * s], x[4 * s + 1]); qa[s][2] = h2_f16(x[4 * s + 2], x[4 * s + 3]);
            qa[s][1] = qa[s][3] = 0u;   // rows 8..15: none
        }
    }
    float o[NT][4], m = NEG, l = 0.f;   // o[i]: row g, output features (2t) D/8 + i and (2t + 1) D/8 + i
    #pragma unroll
    for (int i = 0; i < NT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    for (int j0 = w0; j0 < w1; j0 += 16) {  // (at most 4096 keys: one step a warp, every load of the block at once)
        FaDecStep<D> cur;
        cur.load(a, kb, vb, mrow, j0, w1, g, t);
        float s[2][4];                  // scores: tile kt, row g, keys j0 + 8 kt + 2t, + 1 (c2, c3: rows 8..15)
        #pragma unroll
        for (int kt = 0; kt < 2; ++kt) {
            s[kt][0] = s[kt][1] = s[kt][2] = s[kt][3] = 0.f;
            #pragma unroll
            for (int st = 0; st < NS; ++st) {
                const unsigned b[2] = {fa_word(cur.k[kt], 2 * st), fa_word(cur.k[kt], 2 * st + 1)};
                mma16816<half_t>(s[kt], qa[st], b);
            }
        }
        float mx = m;
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            float& x = s[e >> 1][e & 1];
            if (a.softcap > 0.f) x = a.softcap * LOG2E * tanhf(x);
            x = cur.mk[e] == NEG || g >= np ? NEG : x + slope * cur.mk[e];
            mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float c = mx == NEG ? 1.f : fa_exp2(m - mx), off = mx == NEG ? 0.f : mx;
        m = mx;
        l *= c;
        #pragma unroll
        for (int i = 0; i < NT; ++i) { o[i][0] *= c; o[i][1] *= c; }
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            float& x = s[e >> 1][e & 1];
            x = fa_exp2(x - off);
            l += x;
        }
        const unsigned pa[4] = {h2_f16(s[0][0], s[0][1]), 0u, h2_f16(s[1][0], s[1][1]), 0u};
        #pragma unroll
        for (int i = 0; i < NT; ++i) {  // B: V rows 2t, 2t + 1 (then + 8) at feature D/8 g + i, packed
            const unsigned sel = i & 1 ? 0x7632u : 0x5410u;
            const unsigned b[2] = {__byte_perm(fa_word(cur.v[0], i >> 1), fa_word(cur.v[1], i >> 1), sel),
                                   __byte_perm(fa_word(cur.v[2], i >> 1), fa_word(cur.v[3], i >> 1), sel)};
            mma16816<half_t>(o[i], pa, b);
        }
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < np) {
        if (t == 0) { wm[warp][g] = m == NEG ? NEG : m * 0.6931471805599453f; wl[warp][g] = l; }
        #pragma unroll
        for (int i = 0; i < NT; ++i) {
            wacc[warp][g][2 * t * NT + i] = o[i][0];
            wacc[warp][g][(2 * t + 1) * NT + i] = o[i][1];
        }
    }
    fa_finish<W, RB, D, CL>(a, wm, wl, wacc, np, p0, kh, i3);
}
