// The conv family's kernels (kernels/conv.py): im2col (1-D, 2-D), conv_1d, conv_2d (the implicit GEMM conv_2d_tiled, the
// shallow-reduction conv_2d_direct, the band im2col of im2col + cuBLASLt), conv_2d_dw (one thread per output, and the
// fast 3x3 CWHN conv_dw3_cwhn) and conv_transpose_2d; instantiated by conv*.cu. DIRECT_K and DIRECT_W come from the
// compiler's options (kernels/__init__.py).
#pragma once
#include "common.cuh"
#include "ops.cuh"

// the conv parameters: strides s0, s1, dilation d0, paddings q0, q1, dilation d1 (Args.ip, int_params)
#define CONV_PARAMS(a) const int s0 = (a).ip[0], s1 = (a).ip[1], d0 = (a).ip[2], q0 = (a).ip[3], q1 = (a).ip[4], \
    d1 = (a).ip[5]

// im2col: src1 b = (IW, IH, IC, N) or 1-D (IL, IC, N); dst = (IC*KH*KW, OW, OH, N) or (IC*K, OL, N)
template <typename S, typename D, bool TWO_D> __device__ void im2col(const Args& a) {
    CONV_PARAMS(a);
    const i64 KW = a.ne0[0], KH = TWO_D ? a.ne0[1] : 1, IW = a.ne1[0], IH = TWO_D ? a.ne1[1] : 1;
    const i64 nbc = a.nb1[TWO_D ? 2 : 1], nbn = a.nb1[TWO_D ? 3 : 2];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const i64 kw = c[0] % KW, kh = (c[0] / KW) % KH, ic = c[0] / (KW * KH);
        const i64 oh = TWO_D ? c[2] : 0, n = TWO_D ? c[3] : c[2];
        const i64 x = c[1] * s0 + kw * d0 - q0, y = oh * s1 + kh * d1 - q1;
        float v = 0.f;
        if (x >= 0 && x < IW && y >= 0 && y < IH)
            v = to_f(*(const S*)(a.src1 + x * a.nb1[0] + y * a.nb1[1] + ic * nbc + n * nbn));
        *(D*)(a.dst + byte_offset(c, a.nb)) = from_f<D>(v);
    }
}

// conv_1d: kernel src0 (K, Cin, Cout), input src1 (L, Cin, N); dst F32 (OL, Cout, N)
template <typename TA, typename TB> __device__ void conv_1d(const Args& a) {
    CONV_PARAMS(a);
    const i64 K = a.ne0[0], CI = a.ne0[1], L = a.ne1[0];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* k = a.src0 + c[1] * a.nb0[2];
        const char* in = a.src1 + c[2] * a.nb1[2];
        float sum = 0.f;
        for (i64 kw = 0; kw < K; ++kw) {
            const i64 x = c[0] * s0 + kw * d0 - q0;
            if (x < 0 || x >= L) continue;
            for (i64 ci = 0; ci < CI; ++ci)
                sum += to_f(*(const TA*)(k + kw * a.nb0[0] + ci * a.nb0[1])) * to_f(*(const TB*)(in + x * a.nb1[0] + ci * a.nb1[1]));
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}

// depthwise: kernel src0 (KW, KH, 1, C), input src1 (W, H, C, N) any strides; dst F32 (OW, OH, C, N) by its nb.
// CF: threads walk dst channels first (its memory order when it is CWHN), so loads and stores coalesce
template <typename TA, typename TB, bool CF> __device__ void conv_dw(const Args& a) {
    CONV_PARAMS(a);
    const i64 KW = a.ne0[0], KH = a.ne0[1], IW = a.ne1[0], IH = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        if (CF) {
            c[2] = i % a.ne[2]; i64 r = i / a.ne[2];
            c[0] = r % a.ne[0]; r /= a.ne[0];
            c[1] = r % a.ne[1]; c[3] = r / a.ne[1];
        } else {
            unravel(i, a.ne, c);
        }
        const char* k = a.src0 + c[2] * a.nb0[3];
        const char* in = a.src1 + c[2] * a.nb1[2] + c[3] * a.nb1[3];
        float sum = 0.f;
        for (i64 kh = 0; kh < KH; ++kh) {
            const i64 y = c[1] * s1 + kh * d1 - q1;
            if (y < 0 || y >= IH) continue;
            for (i64 kw = 0; kw < KW; ++kw) {
                const i64 x = c[0] * s0 + kw * d0 - q0;
                if (x < 0 || x >= IW) continue;
                sum += to_f(*(const TA*)(k + kw * a.nb0[0] + kh * a.nb0[1]))
                     * to_f(*(const TB*)(in + x * a.nb1[0] + y * a.nb1[1]));
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}

// depthwise 3x3, stride S (both ways), dilation 1, for a channels-contiguous input src1 (nb1[2] == sizeof(TB))
// and a contiguous CWHN result (C, OW, OH, N) of TD written at a.dst (the conv's F32 memory, or a fused epilogue's
// last node: then + bias src2 (TD, C) and activation iop, see epilogue_act). One thread computes VEC channels
// (vector loads and stores) of TW outputs along a row, sliding over the (TW - 1) * S + 3 input columns it
// needs once per tap row; threads walk channels first, so a warp reads and writes contiguous bytes. 32-bit
// index math within one image (dw_fast checks the extents).
template <int VEC> struct DwVec {                // VEC elements of T at p, one scalar access each
    template <typename T> static __device__ __forceinline__ void load(const char* p, float* v) {
        for (int i = 0; i < VEC; ++i) v[i] = to_f(((const T*)p)[i]);
    }
    template <typename T> static __device__ __forceinline__ void store(char* p, const float* v) {
        for (int i = 0; i < VEC; ++i) ((T*)p)[i] = from_f<T>(v[i]);
    }
};
template <> struct DwVec<4> {                     // one vector access (load4 / store4: 8 bytes of half, 16 of float)
    template <typename T> static __device__ __forceinline__ void load(const char* p, float* v) {
        const float4 q = load4<T>(p); v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    }
    template <typename T> static __device__ __forceinline__ void store(char* p, const float* v) {
        store4<T>(p, make_float4(v[0], v[1], v[2], v[3]));
    }
};
template <typename TA, typename TB, typename TD, int VEC, int S> __device__ void conv_dw3_cwhn(const Args& a) {
    constexpr int K = 3, TW = 4, NIN = (TW - 1) * S + K;         // TW: DW3_TW in Python
    const int q0 = a.ip[3], q1 = a.ip[4];                          // paddings (strides S, dilations 1)
    const int C = (int)a.ne[2], OW = (int)a.ne[0], OH = (int)a.ne[1];
    const int IW = (int)a.ne1[0], IH = (int)a.ne1[1];
    const int CG = C / VEC, TWN = (OW + TW - 1) / TW;
    const int total = CG * TWN * OH * (int)a.ne[3];
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    const int cg = t % CG; int r = t / CG;
    const int tw = r % TWN; r /= TWN;
    const int oh = r % OH, n = r / OH;
    const int c0 = cg * VEC, ow0 = tw * TW;
    const int ib0 = (int)a.nb1[0], ib1 = (int)a.nb1[1];
    float w[K * K][VEC];
    const char* wp = a.src0 + (i64)c0 * a.nb0[3];
    if (VEC == 4 && a.nb0[0] == sizeof(TA) && a.nb0[1] == K * sizeof(TA) && a.nb0[3] == K * K * sizeof(TA)
            && ((unsigned long long)a.src0 & (4 * sizeof(TA) - 1)) == 0) {
        // contiguous taps: this thread's 4 channels' 36 taps in 9 vector loads (a warp's loads contiguous bytes;
        // one scalar load a tap and channel strode 18-36 bytes between lanes, its L1 traffic the kernel's bound)
        #pragma unroll
        for (int i = 0; i < K * K; ++i) {
            const float4 q = load4<TA>(wp + i * 4 * (int)sizeof(TA));
            const float e[4] = {q.x, q.y, q.z, q.w};
            #pragma unroll
            for (int u = 0; u < 4; ++u) w[(4 * i + u) % (K * K)][(4 * i + u) / (K * K)] = e[u];
        }
    } else {
        #pragma unroll
        for (int k = 0; k < K * K; ++k)
            #pragma unroll
            for (int v = 0; v < VEC; ++v)
                w[k][v] = to_f(*(const TA*)(wp + (k % K) * a.nb0[0] + (k / K) * a.nb0[1] + (i64)v * a.nb0[3]));
    }
    float acc[TW][VEC];
    #pragma unroll
    for (int o = 0; o < TW; ++o)
        #pragma unroll
        for (int v = 0; v < VEC; ++v) acc[o][v] = 0.f;
    const char* img = a.src1 + (i64)n * a.nb1[3] + c0 * (int)sizeof(TB);
    const int x0 = ow0 * S - q0;
    #pragma unroll
    for (int kh = 0; kh < K; ++kh) {
        const int y = oh * S - q1 + kh;
        if (y < 0 || y >= IH) continue;
        const char* row = img + y * ib1;
        #pragma unroll
        for (int j = 0; j < NIN; ++j) {
            const int x = x0 + j;
            float in[VEC];
            if (x >= 0 && x < IW) {
                DwVec<VEC>::template load<TB>(row + x * ib0, in);
            } else {
                #pragma unroll
                for (int v = 0; v < VEC; ++v) in[v] = 0.f;
            }
            #pragma unroll
            for (int o = 0; o < TW; ++o) {
                const int kw = j - o * S;
                if (kw >= 0 && kw < K) {
                    #pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[o][v] += w[kh * K + kw][v] * in[v];
                }
            }
        }
    }
    float b[VEC];
    #pragma unroll
    for (int v = 0; v < VEC; ++v) b[v] = a.src2 ? to_f(((const TD*)a.src2)[c0 + v]) : 0.f;
    char* d = a.dst + (i64)n * a.nb[3] + oh * (int)a.nb[1] + c0 * (int)sizeof(TD);
    #pragma unroll
    for (int o = 0; o < TW; ++o) {
        if (ow0 + o >= OW) break;
        float out[VEC];
        #pragma unroll
        for (int v = 0; v < VEC; ++v) out[v] = epilogue_act(a.iop, acc[o][v] + b[v]);
        DwVec<VEC>::template store<TD>(d + (ow0 + o) * (int)a.nb[0], out);
    }
}

// transposed: kernel src0 (KW, KH, Cout, Cin), input src1 (W, H, Cin, N), stride p0; dst F32 (OW, OH, Cout, N).
// Output (ox, oy) gathers the input pixels (ix, iy) with ix * s + kx = ox, iy * s + ky = oy.
template <typename TA, typename TB> __device__ void conv_transpose(const Args& a) {
    const i64 s = (i64)a.p0, KW = a.ne0[0], KH = a.ne0[1], CI = a.ne0[3], IW = a.ne1[0], IH = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char* k = a.src0 + c[2] * a.nb0[2];
        const char* in = a.src1 + c[3] * a.nb1[3];
        float sum = 0.f;
        for (i64 ky = c[1] % s; ky < KH; ky += s) {
            const i64 iy = (c[1] - ky) / s;
            if (iy < 0 || iy >= IH) continue;
            for (i64 kx = c[0] % s; kx < KW; kx += s) {
                const i64 ix = (c[0] - kx) / s;
                if (ix < 0 || ix >= IW) continue;
                const char* kp = k + kx * a.nb0[0] + ky * a.nb0[1];
                const char* ip = in + ix * a.nb1[0] + iy * a.nb1[1];
                for (i64 ci = 0; ci < CI; ++ci)
                    sum += to_f(*(const TA*)(kp + ci * a.nb0[3])) * to_f(*(const TB*)(ip + ci * a.nb1[2]));
            }
        }
        *(float*)(a.dst + byte_offset(c, a.nb)) = sum;
    }
}
// conv_2d's im2col for cuBLASLt, a band of `rows` output rows at a time into dst (contiguous D, the band's
// dst.ne = (K, OW, rows, oh0): oh0, its first output row, rides in ne[3]); src0 is the kernel (KW, KH, Cin, Cout),
// src1 one image (W, H, Cin). Two layouts; a thread moves 4 neighbouring values of every tap (kh, kw):
// - im2col_pos, for an image with W innermost: positions first (P x K, P = OW * rows), k = (ci, kh, kw) the
//   kernel's own order; grid (ceil(OW / 4 / block), rows, Cin), a thread takes 4 positions along ow.
// - im2col_cf, for a channels-contiguous image: k first (K x P) with k = (kh, kw, ci), ci fastest (the GEMM reads a
//   copy of the kernel in that order); grid (OW * rows, ceil(Cin / 4 / block)), a thread takes 4 channels (one
//   vector access each way when iop says the image's strides and address allow).
#define IM2COL_SETUP CONV_PARAMS(a); const int KW = (int)a.ne0[0], KH = (int)a.ne0[1], K = (int)a.ne[0]; \
    const int OW = (int)a.ne[1], rows = (int)a.ne[2], oh0 = (int)a.ne[3], IW = (int)a.ne1[0], IH = (int)a.ne1[1]
template <typename S, typename D> __device__ void im2col_pos(const Args& a) {
    IM2COL_SETUP;
    const int ci = blockIdx.z, r = blockIdx.y, ow0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (ow0 >= OW) return;
    const char* plane = a.src1 + ci * a.nb1[2];
    for (int kh = 0; kh < KH; ++kh) {
        const int y = (oh0 + r) * s1 + kh * d1 - q1;
        for (int kw = 0; kw < KW; ++kw) {
            float v[4];
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int x = (ow0 + j) * s0 + kw * d0 - q0;
                v[j] = y >= 0 && y < IH && ow0 + j < OW && x >= 0 && x < IW
                     ? to_f(*(const S*)(plane + x * a.nb1[0] + y * a.nb1[1])) : 0.f;
            }
            D* d = (D*)a.dst + ((i64)((ci * KH + kh) * KW + kw) * rows + r) * OW + ow0;
            if (OW % 4 == 0) {
                store4<D>((char*)d, make_float4(v[0], v[1], v[2], v[3]));
            } else {
                for (int j = 0; j < 4 && ow0 + j < OW; ++j) d[j] = from_f<D>(v[j]);
            }
        }
    }
}
template <typename S, typename D> __device__ void im2col_cf(const Args& a) {
    IM2COL_SETUP;
    const int CI = (int)a.ne0[2], pos = blockIdx.x, c0 = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
    if (c0 >= CI) return;
    const int ow = pos % OW, oh = oh0 + pos / OW;
    for (int tap = 0; tap < KH * KW; ++tap) {
        const int x = ow * s0 + (tap % KW) * d0 - q0, y = oh * s1 + (tap / KW) * d1 - q1;
        const bool in = x >= 0 && x < IW && y >= 0 && y < IH;
        const char* src = a.src1 + x * a.nb1[0] + y * a.nb1[1] + c0 * a.nb1[2];
        D* d = (D*)a.dst + (i64)pos * K + tap * CI + c0;
        if (a.iop) {
            store4<D>((char*)d, in ? load4<S>(src) : make_float4(0.f, 0.f, 0.f, 0.f));
        } else {
            for (int j = 0; j < 4 && c0 + j < CI; ++j) d[j] = from_f<D>(in ? to_f(*(const S*)(src + j * a.nb1[2])) : 0.f);
        }
    }
}
// conv_2d for a shallow reduction K = Cin * KH * KW <= DIRECT_K (an image's first convolution): one thread per
// output position (ow, oh, n) keeps its K taps in registers and loops over the output channels; shared memory
// holds the kernel as float (rows of KP = K rounded up to 4, read 4 at a time; KP * Cout <= DIRECT_W) and each
// tap's offsets. dst (TD) is written through its nb: the conv's F32, or a fused epilogue's last node (+ bias src2
// (TD, Cout) over ne[2], activation iop: epilogue_act).
template <typename TA, typename TB, typename TD> __device__ void conv_2d_direct(const Args& a) {
    CONV_PARAMS(a);
    __shared__ __align__(16) float w[DIRECT_W];
    __shared__ int tx[DIRECT_K], ty[DIRECT_K];
    __shared__ i64 tc[DIRECT_K];
    const int KW = (int)a.ne0[0], KH = (int)a.ne0[1], K = KW * KH * (int)a.ne0[2], KP = (K + 3) / 4 * 4;
    const int CO = (int)a.ne0[3];
    for (int j = threadIdx.x; j < KP * CO; j += blockDim.x) {
        const int co = j / KP, k = j % KP;
        w[j] = k < K ? to_f(*(const TA*)(a.src0 + (k % KW) * a.nb0[0] + (k / KW % KH) * a.nb0[1]
                                         + (k / (KW * KH)) * a.nb0[2] + co * a.nb0[3])) : 0.f;
    }
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        tx[k] = (k % KW) * d0; ty[k] = (k / KW % KH) * d1; tc[k] = (k / (KW * KH)) * a.nb1[2];
    }
    __syncthreads();
    const int IW = (int)a.ne1[0], IH = (int)a.ne1[1];
    const unsigned OW = (unsigned)a.ne[0], OH = (unsigned)a.ne[1], P = OW * OH * (unsigned)a.ne[3];   // < 2^31
    for (unsigned pos = blockIdx.x * blockDim.x + threadIdx.x; pos < P; pos += gridDim.x * blockDim.x) {
        const unsigned ow = pos % OW, oh = pos / OW % OH, n = pos / (OW * OH);
        const char* img = a.src1 + n * a.nb1[3];
        const int x0 = (int)ow * s0 - q0, y0 = (int)oh * s1 - q1;
        float in[DIRECT_K];
        #pragma unroll
        for (int k = 0; k < DIRECT_K; ++k) {
            in[k] = 0.f;
            const int x = x0 + tx[k < K ? k : 0], y = y0 + ty[k < K ? k : 0];
            if (k < K && x >= 0 && x < IW && y >= 0 && y < IH)
                in[k] = to_f(*(const TB*)(img + x * a.nb1[0] + y * a.nb1[1] + tc[k]));
        }
        char* d = a.dst + ow * a.nb[0] + oh * a.nb[1] + n * a.nb[3];
        #pragma unroll 2
        for (int co = 0; co < CO; ++co) {
            const float4* wc = (const float4*)(w + co * KP);
            float acc = 0.f;
            #pragma unroll
            for (int k4 = 0; k4 < DIRECT_K / 4; ++k4) {
                if (4 * k4 < K) {
                    const float4 q = wc[k4];
                    acc += q.x * in[4 * k4] + q.y * in[4 * k4 + 1] + q.z * in[4 * k4 + 2] + q.w * in[4 * k4 + 3];
                }
            }
            const float b = a.src2 ? to_f(((const TD*)a.src2)[co]) : 0.f;
            *(TD*)(d + co * a.nb[2]) = from_f<TD>(epilogue_act(a.iop, acc + b));
        }
    }
}
// conv_2d as an implicit GEMM: dst[co, pos] = sum_k kernel[co, k] * patch[k, pos] with k = (ci, kh, kw) and
// pos = (ow, oh, n). A block of 256 threads computes a TILE_M x TILE_N tile (4 x 4 per thread), staging
// TILE_K-deep slices of both operands in shared memory; blocks loop over the tiles (any grid works).
#define TILE_M 64
#define TILE_N 64
#define TILE_K 16
template <typename TA, typename TB> __device__ void conv_2d_tiled(const Args& a) {
    CONV_PARAMS(a);
    __shared__ float As[TILE_K][TILE_M], Bs[TILE_K][TILE_N];
    const i64 KW = a.ne0[0], KH = a.ne0[1], K = KW * KH * a.ne0[2], M = a.ne0[3];
    const i64 OW = a.ne[0], OH = a.ne[1], P = OW * OH * a.ne[3];
    const i64 tiles_m = (M + TILE_M - 1) / TILE_M, tiles = tiles_m * ((P + TILE_N - 1) / TILE_N);
    const int t = threadIdx.x, lc = t % 64, lk = t / 64, tx = t % 16, ty = t / 16;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 m0 = (tile % tiles_m) * TILE_M, p0 = (tile / tiles_m) * TILE_N;
        // this thread's loads: kernel row m0 + lc, patch column p0 + lc
        const i64 m = m0 + lc, pos = p0 + lc;
        const char* krow = a.src0 + (m < M ? m : 0) * a.nb0[3];
        const i64 ow = pos % OW, oh = (pos / OW) % OH, n = pos / (OW * OH);
        const i64 xb = ow * s0 - q0, yb = oh * s1 - q1;
        const char* img = a.src1 + (pos < P ? n : 0) * a.nb1[3];
        float acc[4][4] = {};
        for (i64 k0 = 0; k0 < K; k0 += TILE_K) {
            for (int r = 0; r < TILE_K / 4; ++r) {
                const int kk = lk + 4 * r;
                const i64 k = k0 + kk, kw = k % KW, kh = (k / KW) % KH, ci = k / (KW * KH);
                float av = 0.f, bv = 0.f;
                if (k < K && m < M) av = to_f(*(const TA*)(krow + kw * a.nb0[0] + kh * a.nb0[1] + ci * a.nb0[2]));
                const i64 x = xb + kw * d0, y = yb + kh * d1;
                if (k < K && pos < P && x >= 0 && x < a.ne1[0] && y >= 0 && y < a.ne1[1])
                    bv = to_f(*(const TB*)(img + x * a.nb1[0] + y * a.nb1[1] + ci * a.nb1[2]));
                As[kk][lc] = av;
                Bs[kk][lc] = bv;
            }
            __syncthreads();
            #pragma unroll
            for (int kk = 0; kk < TILE_K; ++kk) {
                float av[4], bv[4];
                for (int i = 0; i < 4; ++i) { av[i] = As[kk][ty * 4 + i]; bv[i] = Bs[kk][tx + 16 * i]; }
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
            }
            __syncthreads();
        }
        for (int j = 0; j < 4; ++j) {
            const i64 q = p0 + tx + 16 * j;
            if (q >= P) continue;
            const i64 c[4] = {q % OW, (q / OW) % OH, 0, q / (OW * OH)};
            for (int i = 0; i < 4; ++i) {
                const i64 co = m0 + ty * 4 + i;
                if (co >= M) continue;
                const i64 cc[4] = {c[0], c[1], co, c[3]};
                *(float*)(a.dst + byte_offset(cc, a.nb)) = acc[i][j];
            }
        }
    }
}
