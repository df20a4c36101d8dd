// win_attn, the windowed and cross attention of the fusion pass's attention pattern (kernels/attention.py): AttnArgs
// (twin of the ctypes struct), win_attn_k (CUDA cores, F32 math, SPLIT lanes per query) and win_attn_tc_k (tensor
// cores, F16 / BF16 q, k, v); instantiated per head dim by attention_hd*.cu.
#pragma once
#include "mma.cuh"

struct AttnArgs {
    const char* q; const char* k; const char* v; const char* mask; char* dst;
    i64 qs[3]; i64 ks[3]; i64 vs[3];              // bytes between tokens, heads, windows
    i64 ms[3];                                     // mask: bytes between query rows, heads, windows
    i64 ds[3];                                     // dst: bytes between tokens, heads, windows
    int n, nk, mh, mw;                             // queries and keys per window; the mask's heads and windows
    int hr, wr;                                    // query heads and windows per head and window of k and v
    float scale;
};

template <int HD, int SPLIT, typename M, typename T, typename D> __device__ void win_attn_k(const AttnArgs& a) {
    constexpr int KC = 64, PAD = 4;
    __shared__ __align__(16) float Ks[KC][HD + PAD];
    __shared__ __align__(16) float Vs[KC][HD + PAD];
    const float NEG = __int_as_float(0xff800000);
    const int part = threadIdx.x & (SPLIT - 1), n = blockIdx.x * (blockDim.x / SPLIT) + threadIdx.x / SPLIT;
    const int h = blockIdx.y, w = blockIdx.z, N = a.n, NK = a.nk;
    const bool active = n < N;
    const char* kb = a.k + (h / a.hr) * a.ks[1] + (w / a.wr) * a.ks[2];
    const char* vb = a.v + (h / a.hr) * a.vs[1] + (w / a.wr) * a.vs[2];
    float q[HD], acc[HD];
    #pragma unroll
    for (int d = 0; d < HD; d += 4) {
        float4 v4 = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active) v4 = load4<T>(a.q + n * a.qs[0] + h * a.qs[1] + w * a.qs[2] + d * sizeof(T));
        q[d] = v4.x; q[d + 1] = v4.y; q[d + 2] = v4.z; q[d + 3] = v4.w;
        acc[d] = acc[d + 1] = acc[d + 2] = acc[d + 3] = 0.f;
    }
    const char* mrow = a.mask && active ? a.mask + n * a.ms[0] + (h % a.mh) * a.ms[1] + (w % a.mw) * a.ms[2] : 0;
    float m = NEG, l = 0.f;
    for (int j0 = 0; j0 < NK; j0 += KC) {
        const int kc = min(KC, NK - j0);
        __syncthreads();                           // the previous chunk is read by everyone
        for (int t = threadIdx.x; t < kc * (HD / 4); t += blockDim.x) {
            const int j = t / (HD / 4), d = (t % (HD / 4)) * 4;
            *(float4*)&Ks[j][d] = load4<T>(kb + (i64)(j0 + j) * a.ks[0] + d * sizeof(T));
            *(float4*)&Vs[j][d] = load4<T>(vb + (i64)(j0 + j) * a.vs[0] + d * sizeof(T));
        }
        __syncthreads();
        if (active) {
            // this lane's keys of the chunk (every SPLIT-th): all scores first (independent dot products),
            // one rescale per chunk by the chunk's max, then the weighted sum of V
            constexpr int G = KC / SPLIT < 8 ? KC / SPLIT : 8;   // keys of a lane per rescale (registers vs. rescales)
            // one lane per query runs for a few keys (kc <= G, split_of): only g = 0 ever runs, unrolling compiles
            // the loop body KC / G times for nothing
            #pragma unroll (SPLIT == 1 ? 1 : KC / SPLIT / G)
            for (int g = 0; g < KC / SPLIT; g += G) {
                if (part + g * SPLIT >= kc) break;
                float sc[G];
                float cmax = NEG;
                #pragma unroll
                for (int t = 0; t < G; ++t) {
                    const int j = part + (g + t) * SPLIT;
                    float s = NEG;
                    if (j < kc) {
                        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
                        #pragma unroll
                        for (int d = 0; d < HD; d += 4) {
                            const float4 k4 = *(const float4*)&Ks[j][d];
                            s0 += q[d] * k4.x; s1 += q[d + 1] * k4.y; s2 += q[d + 2] * k4.z; s3 += q[d + 3] * k4.w;
                        }
                        s = ((s0 + s1) + (s2 + s3)) * a.scale;
                        if (mrow) s += to_f(*(const M*)(mrow + (i64)(j0 + j) * sizeof(M)));
                    }
                    sc[t] = s;
                    cmax = fmaxf(cmax, s);
                }
                if (cmax > m) {                         // a new running max: rescale what was summed so far
                    const float c = m == NEG ? 0.f : expf(m - cmax);
                    l *= c;
                    #pragma unroll
                    for (int d = 0; d < HD; ++d) acc[d] *= c;
                    m = cmax;
                }
                #pragma unroll
                for (int t = 0; t < G; ++t) {
                    const int j = part + (g + t) * SPLIT;
                    if (j < kc) {
                        const float p = sc[t] == NEG ? 0.f : expf(sc[t] - m);
                        l += p;
                        #pragma unroll
                        for (int d = 0; d < HD; d += 4) {
                            const float4 v4 = *(const float4*)&Vs[j][d];
                            acc[d] += p * v4.x; acc[d + 1] += p * v4.y; acc[d + 2] += p * v4.z; acc[d + 3] += p * v4.w;
                        }
                    }
                }
            }
        }
    }
    // combine the SPLIT lanes of each query (every lane ends with the whole result)
    #pragma unroll
    for (int o = 1; o < SPLIT; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        const float mn = fmaxf(m, m2);
        const float c1 = m == NEG ? 0.f : expf(m - mn), c2 = m2 == NEG ? 0.f : expf(m2 - mn);
        l = l * c1 + l2 * c2;
        #pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] = acc[d] * c1 + __shfl_xor_sync(0xffffffffu, acc[d], o) * c2;
        m = mn;
    }
    if (!active) return;
    const float inv = 1.f / l;
    char* out = a.dst + n * a.ds[0] + h * a.ds[1] + w * a.ds[2];
    #pragma unroll
    for (int d = 0; d < HD; d += 4)
        if ((d / 4) % SPLIT == part)
            store4<D>(out + d * sizeof(D), make_float4(acc[d] * inv, acc[d + 1] * inv, acc[d + 2] * inv, acc[d + 3] * inv));
}
// Tensor-core window attention for F16 / BF16 q, k, v (mma.sync m16n8k16, F32 accumulation). One warp per 16
// queries of one (window, head), TC_WARPS warps per block; keys in chunks of 64 staged in shared memory (K as
// rows, V transposed); scores and the online softmax stay in registers, where the accumulators of two 8-key
// blocks are the A operand of P.V (FlashAttention-2's layout); P is rounded to T for that product.
#define TC_WARPS 4
template <int HD, typename M, typename T, typename D> __device__ void win_attn_tc_k(const AttnArgs& a) {
    constexpr int KC = 64, KP = HD + 8, VP = KC + 8;         // row paddings (halves) against bank conflicts
    __shared__ __align__(16) unsigned short Ks[KC][KP];
    __shared__ __align__(16) unsigned short Vt[HD][VP];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y, w = blockIdx.z, N = a.n, NK = a.nk;
    const int q0 = (blockIdx.x * TC_WARPS + warp) * 16;
    const char* qb = a.q + h * a.qs[1] + w * a.qs[2];
    const char* kb = a.k + (h / a.hr) * a.ks[1] + (w / a.wr) * a.ks[2];
    const char* vb = a.v + (h / a.hr) * a.vs[1] + (w / a.wr) * a.vs[2];
    unsigned qa[HD / 16][4];                                  // A fragments of Q (16 x HD, row-major)
    #pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = q0 + g + (r & 1) * 8, col = ks * 16 + t4 * 2 + (r >> 1) * 8;
            qa[ks][r] = row < N ? *(const unsigned*)(qb + row * a.qs[0] + col * 2) : 0u;
        }
    const char* mrow[2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int row = q0 + g + i * 8;
        mrow[i] = a.mask && row < N ? a.mask + row * a.ms[0] + (h % a.mh) * a.ms[1] + (w % a.mw) * a.ms[2] : 0;
    }
    float o[HD / 8][4], m[2] = {NEG, NEG}, l[2] = {0.f, 0.f};
    #pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    for (int j0 = 0; j0 < NK; j0 += KC) {
        const int kc = min(KC, NK - j0);
        __syncthreads();                                      // the previous chunk is read by everyone
        for (int i = threadIdx.x; i < KC * HD / 2; i += blockDim.x) {
            const int j = i / (HD / 2), d = (i % (HD / 2)) * 2;
            unsigned kv = 0u, vv = 0u;
            if (j < kc) {
                kv = *(const unsigned*)(kb + (i64)(j0 + j) * a.ks[0] + d * 2);
                vv = *(const unsigned*)(vb + (i64)(j0 + j) * a.vs[0] + d * 2);
            }
            *(unsigned*)&Ks[j][d] = kv;
            Vt[d][j] = (unsigned short)(vv & 0xffffu);
            Vt[d + 1][j] = (unsigned short)(vv >> 16);
        }
        __syncthreads();
        if (q0 >= N) continue;                                // no query of this warp (barriers still met)
        float s[KC / 8][4];
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
            #pragma unroll
            for (int ks = 0; ks < HD / 16; ++ks) {
                const unsigned b[2] = {*(const unsigned*)&Ks[nb * 8 + g][ks * 16 + t4 * 2],
                                       *(const unsigned*)&Ks[nb * 8 + g][ks * 16 + t4 * 2 + 8]};
                mma16816<T>(s[nb], qa[ks], b);
            }
        }
        float cmax[2] = {NEG, NEG};
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int j = j0 + nb * 8 + t4 * 2 + (r & 1), i = r >> 1;
                float v = NEG;
                if (j < NK) {
                    v = s[nb][r] * a.scale;
                    if (mrow[i]) v += to_f(*(const M*)(mrow[i] + (i64)j * sizeof(M)));
                }
                s[nb][r] = v;
                cmax[i] = fmaxf(cmax[i], v);
            }
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 1));
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 2));
            if (cmax[i] > m[i]) {                             // a new running max: rescale what was summed so far
                const float c = m[i] == NEG ? 0.f : expf(m[i] - cmax[i]);
                l[i] *= c;
                #pragma unroll
                for (int nd = 0; nd < HD / 8; ++nd) { o[nd][2 * i] *= c; o[nd][2 * i + 1] *= c; }
                m[i] = cmax[i];
            }
        }
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = r >> 1;
                const float p = s[nb][r] == NEG ? 0.f : expf(s[nb][r] - m[i]);
                l[i] += p;
                s[nb][r] = p;
            }
        #pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk) {
            const unsigned pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int nd = 0; nd < HD / 8; ++nd) {
                const unsigned b[2] = {*(const unsigned*)&Vt[nd * 8 + g][kk * 16 + t4 * 2],
                                       *(const unsigned*)&Vt[nd * 8 + g][kk * 16 + t4 * 2 + 8]};
                mma16816<T>(o[nd], pa, b);
            }
        }
    }
    if (q0 >= N) return;
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    #pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd)
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int i = r >> 1, row = q0 + g + i * 8;
            if (row < N)
                *(D*)(a.dst + row * a.ds[0] + h * a.ds[1] + w * a.ds[2] + (nd * 8 + t4 * 2 + (r & 1)) * sizeof(D)) =
                    from_f<D>(o[nd][r] / l[i]);
        }
}
