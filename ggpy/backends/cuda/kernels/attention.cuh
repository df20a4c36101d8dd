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
// Tensor-core window attention for F16 / BF16 q, k, v (mma.sync m16n8k16, F32 accumulation). A block of TC_WARPS
// warps takes 16 queries a warp of one (window, head). Per chunk of 64 keys, the K and V rows (and, with the first,
// the block's Q rows) go to shared memory by 16-byte cp.async, the chunk's mask rows as F32 (-inf past the last
// key); ldmatrix feeds the products (V transposed on the way). Scores and the online softmax (exp2) stay in
// registers, where the accumulators of two 8-key blocks are the A operand of P.V (FlashAttention-2's layout); P is
// rounded to T for that product.
#define TC_WARPS 4
template <int HD, typename M, typename T, typename D> __device__ void win_attn_tc_k(const AttnArgs& a) {
    constexpr int KC = 64, P = HD + 8, ROWS = TC_WARPS * 16, MP = KC + 4, THREADS = TC_WARPS * 32;
    constexpr float LOG2E = 1.4426950408889634f;
    __shared__ __align__(16) unsigned short Qs[ROWS * P];     // rows padded by 8 halves: ldmatrix without conflicts
    __shared__ __align__(16) unsigned short Ks[KC * P];
    __shared__ __align__(16) unsigned short Vs[KC * P];
    __shared__ __align__(16) float Ms[ROWS * MP];
    const float NEG = __int_as_float(0xff800000);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y, w = blockIdx.z, N = a.n, NK = a.nk, r0 = blockIdx.x * ROWS, q0 = r0 + warp * 16;
    const char* qb = a.q + h * a.qs[1] + w * a.qs[2];
    const char* kb = a.k + (h / a.hr) * a.ks[1] + (w / a.wr) * a.ks[2];
    const char* vb = a.v + (h / a.hr) * a.vs[1] + (w / a.wr) * a.vs[2];
    const char* mb = a.mask ? a.mask + (h % a.mh) * a.ms[1] + (w % a.mw) * a.ms[2] : 0;
    for (int c = threadIdx.x; c < ROWS * HD / 8; c += THREADS) {
        const int r = c / (HD / 8), d = c % (HD / 8) * 8;
        const bool in = r0 + r < N;
        cp_async16(Qs + r * P + d, qb + (in ? (i64)(r0 + r) * a.qs[0] + d * 2 : 0), in ? 16 : 0);
    }
    const float qscale = a.scale * LOG2E;
    unsigned qa[HD / 16][4];                                  // A fragments of Q (16 x HD, row-major)
    float o[HD / 8][4], m[2] = {NEG, NEG}, l[2] = {0.f, 0.f};
    #pragma unroll
    for (int nd = 0; nd < HD / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
    for (int j0 = 0; j0 < NK; j0 += KC) {
        const int kc = min(KC, NK - j0);
        if (j0) __syncthreads();                              // the previous chunk is read by everyone
        for (int c = threadIdx.x; c < KC * HD / 8; c += THREADS) {
            const int j = c / (HD / 8), d = c % (HD / 8) * 8;
            const bool in = j < kc;
            cp_async16(Ks + j * P + d, kb + (in ? (i64)(j0 + j) * a.ks[0] + d * 2 : 0), in ? 16 : 0);
            cp_async16(Vs + j * P + d, vb + (in ? (i64)(j0 + j) * a.vs[0] + d * 2 : 0), in ? 16 : 0);
        }
        cp_commit();
        // the chunk's mask rows: F32 by 4-byte cp.async (scaled when read), F16 converted on the way
        const int j = threadIdx.x % KC;
        const char* mp = mb ? mb + (i64)(r0 + threadIdx.x / KC) * a.ms[0] + (i64)(j0 + j) * sizeof(M) : 0;
        #pragma unroll 8
        for (int r = threadIdx.x / KC; r < ROWS; r += THREADS / KC, mp += THREADS / KC * a.ms[0]) {
            float* dst = Ms + r * MP + j;
            if (j >= kc) *dst = NEG;
            else if (!mb || r0 + r >= N) *dst = 0.f;
            else if constexpr (sizeof(M) == 4) cp_async4(dst, mp);
            else *dst = to_f(*(const M*)mp);
        }
        cp_wait_all();
        __syncthreads();
        if (q0 >= N) continue;                                // no query of this warp (barriers still met)
        if (j0 == 0)
            #pragma unroll
            for (int ks = 0; ks < HD / 16; ++ks) ldsm4(qa[ks], Qs + (warp * 16 + (lane & 15)) * P + ks * 16 + (lane >> 4) * 8);
        float s[KC / 8][4];
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
        #pragma unroll
        for (int nb = 0; nb < KC / 8; nb += 2) {
            if (nb * 8 >= kc) break;
            #pragma unroll
            for (int ks = 0; ks < HD / 16; ++ks) {
                unsigned b[4];
                ldsm4(b, Ks + (nb * 8 + (lane & 7) + (lane >> 4) * 8) * P + ks * 16 + ((lane >> 3) & 1) * 8);
                mma16816<T>(s[nb], qa[ks], b);
                mma16816<T>(s[nb + 1], qa[ks], b + 2);
            }
        }
        float cmax[2] = {NEG, NEG};
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float2 mk = *(const float2*)&Ms[(warp * 16 + g + i * 8) * MP + nb * 8 + t4 * 2];
                s[nb][2 * i] = fmaf(mk.x, LOG2E, s[nb][2 * i] * qscale);
                s[nb][2 * i + 1] = fmaf(mk.y, LOG2E, s[nb][2 * i + 1] * qscale);
                cmax[i] = fmaxf(cmax[i], fmaxf(s[nb][2 * i], s[nb][2 * i + 1]));
            }
        float mz[2];                                          // the running max, 0 while every score is -inf
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 1));
            cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 2));
            if (cmax[i] > m[i]) {                             // a new running max: rescale what was summed so far
                const float c = m[i] == NEG ? 0.f : exp2f(m[i] - cmax[i]);
                l[i] *= c;
                #pragma unroll
                for (int nd = 0; nd < HD / 8; ++nd) { o[nd][2 * i] *= c; o[nd][2 * i + 1] *= c; }
                m[i] = cmax[i];
            }
            mz[i] = m[i] == NEG ? 0.f : m[i];
        }
        #pragma unroll
        for (int nb = 0; nb < KC / 8; ++nb)
            #pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float p = exp2f(s[nb][r] - mz[r >> 1]);
                l[r >> 1] += p;
                s[nb][r] = p;
            }
        #pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk) {
            if (kk * 16 >= kc) break;
            const unsigned pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            #pragma unroll
            for (int nd = 0; nd < HD / 8; nd += 2) {
                unsigned b[4];
                ldsm4t(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + nd * 8 + (lane >> 4) * 8);
                mma16816<T>(o[nd], pa, b);
                mma16816<T>(o[nd + 1], pa, b + 2);
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
    for (int i = 0; i < 2; ++i) {
        const int row = q0 + g + i * 8;
        if (row >= N) continue;
        char* out = a.dst + row * a.ds[0] + h * a.ds[1] + w * a.ds[2] + t4 * 2 * sizeof(D);
        #pragma unroll
        for (int nd = 0; nd < HD / 8; ++nd)
            store2<D>(out + nd * 8 * sizeof(D), o[nd][2 * i] / l[i], o[nd][2 * i + 1] / l[i]);
    }
}
