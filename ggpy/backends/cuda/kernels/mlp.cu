// mlp_tc: a transformer's feed-forward y = r + W2 act(W1 LayerNorm(x) + b1) + b2 in one kernel (the fusion pass's
// mlp pattern, kernels/mlp.py), F16 / BF16 on tensor cores (mma.sync m16n8k16, F32 accumulation). A block of 8
// warps takes 64 rows of x (ne[0] = C): it normalises them in shared memory (F32 statistics, rounded to T as the
// unfused LayerNorm writes them, then kept in registers as A fragments), then walks the hidden width in chunks of
// 64: h = act(x W1[chunk]^T + b1) rounded to T into shared memory, y += h W2[:, chunk]^T in registers. The next chunk's
// W1 rows load (cp.async) during this chunk's second product, its W2 columns during its first. The normalised rows
// and the hidden activations never leave the SM.
#include "mma.cuh"
#include "ops.cuh"

struct MlpArgs {
    const char* x; const char* gamma; const char* beta; const char* w1; const char* b1; const char* w2;
    const char* b2; const char* r; char* dst;
    int rows, hidden, act;           // rows of x, W1's rows (a multiple of 64), the activation's id (ops.cuh)
    float eps;
};

#define MLP_ROWS 64
#define MLP_CHUNK 64

template <int C> struct MlpSmem {            // halves of each shared tile, rows padded by 8 against bank conflicts
    static constexpr int XP = C + 8, HP = MLP_CHUNK + 8;
    static constexpr int X = MLP_ROWS * XP, W1 = MLP_CHUNK * XP, W2 = C * HP, H = MLP_ROWS * HP;
};

__device__ __forceinline__ float mlp_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// GELU with erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7, far below the F16 / BF16 rounding of h): a
// third of erff's instructions, which the hidden activations (4x the width) would otherwise spend most of their time on
__device__ __forceinline__ float mlp_act(int act, float x) {
    if (act != GGPY_ACT_GELU_ERF) return epilogue_act(act, x);
    const float z = fabsf(x) * 0.7071067811865476f, t = __frcp_rn(1.f + 0.3275911f * z);
    const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
    const float e = 1.f - p * __expf(-z * z);
    return 0.5f * x * (1.f + copysignf(e, x));
}

// WM warps down the 64 rows (each 64 / WM rows: its normalised rows' A fragments kept in registers for every chunk),
// 8 / WM across: the hidden chunk's columns in the first product, y's C columns in the second
template <int C, int WM, typename T> __device__ void mlp_tc_k(const MlpArgs& a) {
    using S = MlpSmem<C>;
    constexpr int XP = S::XP, HP = S::HP, WN = 8 / WM, MT = MLP_ROWS / WM / 16, HT = MLP_CHUNK / WN / 8, NT = C / WN / 8;
    static_assert(HT % 2 == 0 && C % (WN * 8) == 0, "tiles of two n8 blocks in the first product");
    extern __shared__ __align__(16) unsigned short mlp_smem[];
    unsigned short* xs = mlp_smem;
    unsigned short* w1s = xs + S::X;
    unsigned short* w2s = w1s + S::W1;
    unsigned short* hs = w2s + S::W2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int wm = warp % WM, wn = warp / WM, row0 = blockIdx.x * MLP_ROWS, chunks = a.hidden / MLP_CHUNK;
    const int rw = wm * (MLP_ROWS / WM);                      // the warp's first row in the block
    auto load_w1 = [&](int c) {               // W1's rows c*64 .. c*64+63 (C halves each)
        for (int i = threadIdx.x; i < MLP_CHUNK * C / 8; i += blockDim.x) {
            const int j = i / (C / 8), d = i % (C / 8) * 8;
            cp_async16(w1s + j * XP + d, a.w1 + ((i64)(c * MLP_CHUNK + j) * C + d) * 2, 16);
        }
    };
    auto load_w2 = [&](int c) {               // W2's columns c*64 .. c*64+63 of its C rows
        for (int i = threadIdx.x; i < C * MLP_CHUNK / 8; i += blockDim.x) {
            const int n = i / (MLP_CHUNK / 8), d = i % (MLP_CHUNK / 8) * 8;
            cp_async16(w2s + n * HP + d, a.w2 + ((i64)n * a.hidden + c * MLP_CHUNK + d) * 2, 16);
        }
    };
    load_w1(0); cp_commit();
    load_w2(0); cp_commit();
    for (int i = threadIdx.x; i < MLP_ROWS * C / 8; i += blockDim.x) {
        const int j = i / (C / 8), d = i % (C / 8) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + j < a.rows) v = *(const uint4*)(a.x + ((i64)(row0 + j) * C + d) * 2);
        *(uint4*)(xs + j * XP + d) = v;
    }
    __syncthreads();
    for (int j = warp; j < MLP_ROWS; j += 8) {              // LayerNorm of each row, a warp per row
        float v[C / 32], sum = 0.f, sq = 0.f;
        #pragma unroll
        for (int e = 0; e < C / 32; ++e) { v[e] = to_f(((const T*)(xs + j * XP))[lane + e * 32]); sum += v[e]; }
        const float mean = mlp_warp_sum(sum) / C;
        #pragma unroll
        for (int e = 0; e < C / 32; ++e) { v[e] -= mean; sq += v[e] * v[e]; }
        const float rstd = rsqrtf(mlp_warp_sum(sq) / C + a.eps);
        #pragma unroll
        for (int e = 0; e < C / 32; ++e) {
            const int k = lane + e * 32;
            ((T*)(xs + j * XP))[k] = from_f<T>(v[e] * rstd * to_f(((const T*)a.gamma)[k]) + to_f(((const T*)a.beta)[k]));
        }
    }
    __syncthreads();
    unsigned xa[C / 16][MT][4];                               // the warp's normalised rows as A fragments
    #pragma unroll
    for (int k = 0; k < C / 16; ++k)
        #pragma unroll
        for (int i = 0; i < MT; ++i) ldsm4(xa[k][i], xs + (rw + i * 16 + (lane & 15)) * XP + k * 16 + (lane >> 4) * 8);
    float y[MT][NT][4];
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int n = 0; n < NT; ++n) y[i][n][0] = y[i][n][1] = y[i][n][2] = y[i][n][3] = 0.f;
    for (int c = 0; c < chunks; ++c) {
        cp_wait1();                                          // W1's chunk c (W2's may still be on its way)
        __syncthreads();
        float h[MT][HT][4] = {};
        #pragma unroll
        for (int k = 0; k < C / 16; ++k)
            #pragma unroll
            for (int n = 0; n < HT; n += 2) {
                unsigned b[4];
                ldsm4(b, w1s + (wn * (HT * 8) + n * 8 + (lane & 7) + (lane >> 4) * 8) * XP + k * 16 + ((lane >> 3) & 1) * 8);
                #pragma unroll
                for (int i = 0; i < MT; ++i) { mma16816<T>(h[i][n], xa[k][i], b); mma16816<T>(h[i][n + 1], xa[k][i], b + 2); }
            }
        #pragma unroll
        for (int i = 0; i < MT; ++i)
            #pragma unroll
            for (int n = 0; n < HT; ++n)
                #pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = rw + i * 16 + g + half * 8, col = wn * (HT * 8) + n * 8 + t4 * 2;
                    const T* b1 = (const T*)a.b1 + c * MLP_CHUNK + col;
                    *(unsigned*)(hs + row * HP + col) = pack2<T>(mlp_act(a.act, h[i][n][2 * half] + to_f(b1[0])),
                                                                 mlp_act(a.act, h[i][n][2 * half + 1] + to_f(b1[1])));
                }
        __syncthreads();                                     // h written, W1's tile free
        if (c + 1 < chunks) load_w1(c + 1);
        cp_commit();
        cp_wait1();                                          // W2's chunk c
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < MLP_CHUNK; k += 16) {
            unsigned ha[MT][4];
            #pragma unroll
            for (int i = 0; i < MT; ++i) ldsm4(ha[i], hs + (rw + i * 16 + (lane & 15)) * HP + k + (lane >> 4) * 8);
            #pragma unroll
            for (int n = 0; n < NT; n += 2) {
                unsigned b[4];
                const unsigned short* p = w2s + (wn * (C / WN) + n * 8 + (lane & 7) + (lane >> 4) * 8) * HP + k + ((lane >> 3) & 1) * 8;
                if (n + 1 < NT) ldsm4(b, p); else ldsm2(b, p);
                #pragma unroll
                for (int i = 0; i < MT; ++i) {
                    mma16816<T>(y[i][n], ha[i], b);
                    if (n + 1 < NT) mma16816<T>(y[i][n + 1], ha[i], b + 2);
                }
            }
        }
        __syncthreads();                                     // W2's tile and h read
        if (c + 1 < chunks) load_w2(c + 1);
        cp_commit();
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    #pragma unroll
    for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int n = 0; n < NT; ++n)
            #pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int row = row0 + rw + i * 16 + g + half * 8, col = wn * (C / WN) + n * 8 + t4 * 2;
                if (row >= a.rows) continue;
                const i64 at = ((i64)row * C + col) * 2;
                const T* rr = (const T*)(a.r + at);
                const T* b2 = (const T*)a.b2 + col;
                *(unsigned*)(a.dst + at) = pack2<T>(y[i][n][2 * half] + to_f(b2[0]) + to_f(rr[0]),
                                                    y[i][n][2 * half + 1] + to_f(b2[1]) + to_f(rr[1]));
            }
}

#define MLP_BOUNDS __launch_bounds__(256, 1)
extern "C" __global__ void MLP_BOUNDS mlp_tc_c64_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<64, 2, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c64_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<64, 2, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c96_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<96, 2, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c96_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<96, 2, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c128_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<128, 2, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c128_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<128, 2, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c160_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<160, 2, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c160_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<160, 2, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c192_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<192, 2, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c192_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<192, 2, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c256_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<256, 4, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c256_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<256, 4, bf16_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c320_f16(const MlpArgs a) { grid_dependency(); mlp_tc_k<320, 4, half_t>(a); }
extern "C" __global__ void MLP_BOUNDS mlp_tc_c320_bf16(const MlpArgs a) { grid_dependency(); mlp_tc_k<320, 4, bf16_t>(a); }
