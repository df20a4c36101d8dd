"""The conv family on CUDA: im2col (1-D, 2-D), conv_1d, conv_2d, conv_2d_dw (WHCN and CWHN) and
conv_transpose_2d. conv_2d has four implementations: "implicit" (a shared-memory tiled implicit GEMM, no scratch),
"im2col" (bands of the im2col matrix in the temp block, each followed by one cuBLASLt GEMM), "direct" (shallow
reductions) and "cudnn" (cuDNN's graph API where its Python frontend is installed: ../cudnn_conv.py); the others run
one thread per dst element summing its taps, and a 3x3 CWHN conv_2d_dw runs the fast conv_dw3_cwhn kernel (with
a fused bias and activation when the fusion pass finds them). Every source may have any strides, dst is written
through its nb (so conv_2d_dw's CWHN result keeps its layout). Math runs in float. The integer parameters
(strides, paddings, dilations) travel as int32 in Args.ip.
"""
from __future__ import annotations

from itertools import product
from types import SimpleNamespace

from ....optable import ACTIVATIONS
from ....types import F32
from .. import cudnn_conv
from ..cublas import MISSING, WORKSPACE, Gemm
from ..registry import register
from .common import C_TYPES, FLOATS, SUFFIX, tensor_ptr
from .elementwise import epilogue_act_source
from .matmul import align_temp, contiguous, gemm_type

DW3_STRIDES = (1, 2)            # the strides of the fast 3x3 CWHN depthwise kernel (conv_dw3_cwhn)
DW3_BLOCK = 128
DW3_TW = 4                      # outputs along a row per thread
DIRECT_K = 32                   # conv_2d_direct: the deepest reduction Cin * KH * KW (taps kept in registers)
DIRECT_W = 4096                 # conv_2d_direct: the most kernel values K * Cout (floats in shared memory)
DIRECT_BLOCKS = 1024            # conv_2d_direct's grid at most: each block stages the kernel once, then loops

_TEMPLATE = r"""
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
    #pragma unroll
    for (int k = 0; k < K * K; ++k)
        #pragma unroll
        for (int v = 0; v < VEC; ++v)
            w[k][v] = to_f(*(const TA*)(a.src0 + (k % K) * a.nb0[0] + (k / K) * a.nb0[1] + (i64)(c0 + v) * a.nb0[3]));
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
"""


def int_params(node) -> tuple:
    """Args.ip of the conv kernels: (s0, s1, d0, p0, p1, d1) (CONV_PARAMS); none for conv_transpose_2d."""
    if node.op == "conv_transpose_2d":
        return ()
    p = node.op_params
    return p["s0"], p["s1"], p["d0"], p["p0"], p["p1"], p["d1"]


def _extent(t) -> int:
    """Bytes from t's first to past its last element within one image (dims 0-2)."""
    return sum((n - 1) * b for n, b in zip(t.ne[:3], t.nb[:3])) + t.type.size


def _cwhn_contiguous(t) -> bool:
    """Whether t's (W, H, C, N) elements are packed channels first (C, W, H, N) with no gaps (size-1 dims
    ignored)."""
    expected = t.type.size
    for k in (2, 0, 1, 3):
        if t.ne[k] != 1 and t.nb[k] != expected:
            return False
        expected *= t.ne[k]
    return True


def dw_fast(node) -> int | None:
    """The stride of the fast 3x3 CWHN depthwise kernel (conv_dw3_cwhn) that runs `node`, or None: a 3x3
    kernel, equal strides in DW3_STRIDES, dilation 1, a channels-contiguous input, a contiguous CWHN F32 result
    (F32, F16 or BF16 through a fused cast), and 32-bit offsets within one image."""
    if node.op != "conv_2d_dw" or node.type != F32 or any(s.type not in FLOATS for s in node.src[:2]):
        return None
    a, b = node.src[:2]
    p = node.op_params
    OW, OH, C, N = node.ne
    if a.ne[:2] != (3, 3) or p["s0"] != p["s1"] or p["s0"] not in DW3_STRIDES or p["d0"] != 1 or p["d1"] != 1:
        return None
    if (b.ne[2] > 1 and b.nb[2] != b.type.size) or not _cwhn_contiguous(node):
        return None
    if max(_extent(b), _extent(node)) >= 1 << 31 or C * -(-OW // DW3_TW) * OH * N >= 1 << 31:
        return None
    return p["s0"]


def dw_vec(node, ptrs=()) -> int:
    """Channels per thread of conv_dw3_cwhn: 4 (vector loads and stores) when C % 4 == 0 and the input's
    strides and the given device addresses allow, else 1."""
    b, es = node.src[1], node.src[1].type.size
    if node.ne[2] % 4 or any(nb % (4 * es) for nb, n in zip(b.nb, b.ne) if n > 1 and nb != es):
        return 1
    return 4 if all(p % 16 == 0 for p in ptrs) else 1


def _dw3_name(node, vec: int, out_type=F32) -> str:
    a, b = node.src[:2]
    return f"conv_dw3_cwhn_s{dw_fast(node)}_v{vec}_{SUFFIX[a.type]}_{SUFFIX[b.type]}_{SUFFIX[out_type]}"


def _dw3_config(node, vec: int) -> tuple:
    OW, OH, C, N = node.ne
    total = C // vec * -(-OW // DW3_TW) * OH * N
    return -(-total // DW3_BLOCK), DW3_BLOCK


def _fused_launch(backend, node, kernel: str, dst, layout, srcs: list, config, fused) -> list:
    """[the launch of `kernel` writing `layout` at dst (the node, or the last node of its fused epilogue), taking
    the epilogue's bias as a third source, its activation as iop and its name]."""
    if fused is not None:
        srcs = srcs + [(tensor_ptr(fused.bias), fused.bias)]
    launch = backend.launch(node, kernel, tensor_ptr(dst), layout, srcs, params(node), config,
                            ACTIVATIONS.get(fused.act, 0) if fused is not None else 0, int_params(node))
    if fused is not None:
        launch.name = fused.name(launch.name)
    return [launch]


def dw_steps(backend, node, fused=None) -> list:
    """conv_2d_dw by conv_dw3_cwhn (dw_fast(node) is not None); with `fused` (an Epilogue of the fusion pass:
    optional cast, bias add, optional activation) the result goes to the epilogue's last node, in its type, with
    bias and activation."""
    a, b = node.src[:2]
    dst = fused.last if fused is not None else node
    pb = tensor_ptr(b)
    vec = dw_vec(node, (pb, tensor_ptr(dst)))
    out = SimpleNamespace(ne=node.ne, nb=tuple(nb // F32.size * dst.type.size for nb in node.nb),
                          nelements=node.nelements)       # the conv's CWHN layout in the result's type
    return _fused_launch(backend, node, _dw3_name(node, vec, dst.type), dst, out, [(tensor_ptr(a), a), (pb, b)],
                         _dw3_config(node, vec), fused)


def kernel_name(node) -> str:
    a, b = node.src[0], node.src[1]
    if node.op == "im2col":
        return f"im2col_{'2d' if node.op_params['is_2D'] else '1d'}_{SUFFIX[b.type]}_{SUFFIX[node.type]}"
    if dw_fast(node) is not None:
        return _dw3_name(node, dw_vec(node))
    if node.op == "conv_2d_dw" and node.nb[2] < node.nb[0]:       # channels innermost in dst's memory
        return f"conv_2d_dw_cwhn_{SUFFIX[a.type]}_{SUFFIX[b.type]}"
    return f"{node.op}_{SUFFIX[a.type]}_{SUFFIX[b.type]}"


def refusal(node) -> str | None:
    a, b = node.src[0], node.src[1]
    if b.type not in FLOATS or node.type not in FLOATS or (node.op != "im2col" and a.type not in FLOATS):
        return (f"{node.op} kernels take F32/F16 tensors; got "
                f"{[s.type.name for s in node.src if s is not None]} -> {node.type.name}")
    return None


def launch_config(node):
    """conv_2d: one block of 256 threads per 64 x 64 output tile; the others: the default grid-stride launch."""
    if node.op != "conv_2d":
        return None
    tiles = -(-node.ne[2] // 64) * -(-(node.ne[0] * node.ne[1] * node.ne[3]) // 64)
    return min(tiles, 1 << 16), 256


def params(node) -> tuple:
    """conv_transpose_2d's stride as p0 (the other conv ops take int_params)."""
    return (node.op_params["stride"],) if node.op == "conv_transpose_2d" else ()


def _instances():
    for tb in FLOATS:
        for td in FLOATS:
            for two_d in (False, True):
                name = f"im2col_{'2d' if two_d else '1d'}_{SUFFIX[tb]}_{SUFFIX[td]}"
                yield name, f"im2col<{C_TYPES[tb]}, {C_TYPES[td]}, {str(two_d).lower()}>"
    for ta in FLOATS:
        for tb in FLOATS:
            types = f"{C_TYPES[ta]}, {C_TYPES[tb]}"
            pair = f"{SUFFIX[ta]}_{SUFFIX[tb]}"
            for layout in ("pos", "cf"):
                yield f"im2col_{layout}_{pair}", f"im2col_{layout}<{types}>"
            for td in dict.fromkeys((F32, ta, tb)):
                yield f"conv_2d_direct_{pair}_{SUFFIX[td]}", f"conv_2d_direct<{types}, {C_TYPES[td]}>"
            yield f"conv_1d_{pair}", f"conv_1d<{types}>"
            yield f"conv_2d_{pair}", f"conv_2d_tiled<{types}>"
            yield f"conv_2d_dw_{pair}", f"conv_dw<{types}, false>"
            yield f"conv_2d_dw_cwhn_{pair}", f"conv_dw<{types}, true>"
            for td, stride, vec in product(dict.fromkeys((F32, tb)), DW3_STRIDES, (1, 4)):   # F32, or the input's type
                yield (f"conv_dw3_cwhn_s{stride}_v{vec}_{pair}_{SUFFIX[td]}",
                       f"conv_dw3_cwhn<{types}, {C_TYPES[td]}, {vec}, {stride}>")
            yield f"conv_transpose_2d_{pair}", f"conv_transpose<{types}>"


def source() -> str:
    entries = "".join(f'extern "C" __global__ void {name}(const Args a) {{ {call}(a); }}\n' for name, call in _instances())
    return f"#define DIRECT_K {DIRECT_K}\n#define DIRECT_W {DIRECT_W}\n" + epilogue_act_source() + _TEMPLATE + entries


# -- conv_2d: direct, im2col + cuBLASLt, or implicit GEMM ---------------------------------------------------------
# A shallow reduction K = Cin * KH * KW (<= DIRECT_K) runs conv_2d_direct, which takes a fused epilogue (bias over
# the output channels, activation, a cast). Where K is deep enough, conv_2d runs as im2col bands of output rows
# written to the temp block (at most COLS_BUDGET bytes per band) each followed by one cuBLASLt GEMM
# dst[pos, co] = cols[k, pos]^T kernel[k, co] straight into dst's memory; the rest run the implicit GEMM.
# cuDNN runs it only where measured fastest (autotune) or forced. CUDABackend(force={"conv_2d": "direct" | "implicit" |
# "im2col" | "cudnn"}) forces one way (tests, benchmarks); a forced cudnn that cuDNN refuses (or that has no frontend
# installed) runs choose()'s implementation.
COLS_BUDGET = 32 << 20
IM2COL_MIN_K = 64


def _depth(node) -> int:
    """The reduction K = Cin * KH * KW of a conv_2d."""
    return node.src[0].ne[0] * node.src[0].ne[1] * node.src[0].ne[2]


def im2col_possible(node) -> bool:
    """Whether conv_2d can run as im2col + cuBLASLt: cuBLASLt present, dst's rows contiguous, 32-bit offsets."""
    OW = node.ne[0]
    return (MISSING is None and node.nb[0] == 4 and (node.ne[1] == 1 or node.nb[1] == 4 * OW)
            and node.ne[2] * node.ne[1] * OW * 4 < 1 << 31 and _depth(node) * OW < 1 << 31
            and max(_depth(node), node.ne[1]) < 1 << 16)      # im2col's grid dimensions y and z


def direct_possible(node) -> bool:
    """Whether conv_2d_direct can run `node`: K <= DIRECT_K and the kernel's rows (K rounded up to 4) fit DIRECT_W."""
    return (_depth(node) <= DIRECT_K and -(-_depth(node) // 4) * 4 * node.src[0].ne[3] <= DIRECT_W
            and node.ne[0] * node.ne[1] * node.ne[3] < 1 << 31)


def choose(node) -> str:
    """direct for a shallow reduction, im2col where it is possible and K is deep enough, else the implicit GEMM."""
    if direct_possible(node):
        return "direct"
    return "im2col" if im2col_possible(node) and _depth(node) >= IM2COL_MIN_K else "implicit"


def accepts(node, impl: str) -> bool:
    return {"im2col": im2col_possible, "direct": direct_possible, "cudnn": cudnn_conv.accepts}.get(
        impl, lambda n: True)(node)


def _runs(node, impl: str) -> str:
    """impl, or choose(node) for a cudnn that cuDNN refuses."""
    return choose(node) if impl == "cudnn" and not cudnn_conv.accepts(node) else impl


def direct_steps(backend, node, fused=None) -> list:
    """conv_2d by conv_2d_direct; with `fused` (an Epilogue: optional cast, bias over ne[2], optional activation)
    the result goes to the epilogue's last node, in its type."""
    a, b = node.src[:2]
    dst = fused.last if fused is not None else node
    blocks = min(DIRECT_BLOCKS, -(-(node.ne[0] * node.ne[1] * node.ne[3]) // 256))
    return _fused_launch(backend, node, f"conv_2d_direct_{SUFFIX[a.type]}_{SUFFIX[b.type]}_{SUFFIX[dst.type]}", dst,
                         dst, [(tensor_ptr(a), a), (tensor_ptr(b), b)], (blocks, 256), fused)


def uses_im2col(node, impl: str) -> bool:
    """Whether `impl` runs as im2col + cuBLASLt (a forced im2col that is not possible runs implicit)."""
    return impl == "im2col" and im2col_possible(node)


def _bands(node) -> list:
    """[(n, oh0, rows)] of the im2col bands."""
    K, OW, OH = _depth(node), node.ne[0], node.ne[1]
    per_row = K * OW * gemm_type(node).size
    rows = max(1, min(OH, COLS_BUDGET // per_row))
    count = -(-OH // rows)
    rows = -(-OH // count)
    return [(n, oh0, min(rows, OH - oh0)) for n in range(node.ne[3]) for oh0 in range(0, OH, rows)]


def _positions_first(node) -> bool:
    """Whether im2col runs as im2col_pos (an image with W before C in memory), else im2col_cf."""
    b = node.src[1]
    return b.nb[0] <= b.nb[2]


def _kernel_copy(node):
    """(the kernel as the GEMM reads it, or None where it reads it in place; the view copied): a contiguous copy in
    the GEMM type, for im2col_cf with k = (kh, kw, ci) (the view (Cin, KW, KH, Cout) of the kernel)."""
    a, gtype = node.src[0], gemm_type(node)
    if _positions_first(node):
        return (None, a) if a.type == gtype and a.is_contiguous() else (contiguous(a, gtype), a)
    view = SimpleNamespace(ne=(a.ne[2], a.ne[0], a.ne[1], a.ne[3]), nb=(a.nb[2], a.nb[0], a.nb[1], a.nb[3]),
                           nelements=a.nelements, name=a.name)
    return contiguous(view, gtype), view


def temp_size(node, impl: str) -> int:
    """im2col conv_2d: cuBLASLt's workspace, the largest band of im2col matrix, a kernel copy when needed; cudnn:
    cuDNN's workspace and copies (cudnn_conv.temp_size)."""
    impl = _runs(node, impl)
    if impl == "cudnn":
        return cudnn_conv.temp_size(node)
    if not uses_im2col(node, impl):
        return 0
    cols = _depth(node) * node.ne[0] * max(r for _, _, r in _bands(node)) * gemm_type(node).size
    c, _ = _kernel_copy(node)
    return WORKSPACE + align_temp(cols) + (align_temp(c.nbytes) if c is not None else 0)


def _im2col_config(pos: bool, OW: int, rows: int, CI: int) -> tuple:
    """(grid, block) of im2col_pos (4 positions along ow a thread) or im2col_cf (4 channels a thread)."""
    quads = -(-(OW if pos else CI) // 4)
    block = min(256, -(-quads // 32) * 32)
    return ((-(-quads // block), rows, CI), block) if pos else ((OW * rows, -(-quads // block)), block)


def _cf_vector(b, pb: int) -> int:
    """im2col_cf's iop: 1 when the image's channels are contiguous and its pixels 4-channel aligned (vector access)."""
    es = b.type.size
    return int(b.ne[2] % 4 == 0 and b.nb[2] == es and all(nb % (4 * es) == 0 for nb in (b.nb[0], b.nb[1], b.nb[3]))
               and pb % (4 * es) == 0)


def conv_2d_steps(backend, node, impl: str) -> list:
    """The direct or implicit GEMM's one launch, the im2col bands and their GEMMs, or cuDNN's steps."""
    impl = _runs(node, impl)
    if impl == "cudnn":
        return cudnn_conv.steps(backend, node)
    if impl == "direct" and direct_possible(node):
        return direct_steps(backend, node)
    if not uses_im2col(node, impl):
        return [backend.launch_node(node)]
    a, b = node.src[:2]
    gtype = gemm_type(node)
    KW, KH, CI, CO = a.ne
    K, OW = KW * KH * CI, node.ne[0]
    temp = backend.temp_ptr(node)
    cols = temp + WORKSPACE
    bands = _bands(node)
    pk, steps_ = tensor_ptr(a), []
    c, view = _kernel_copy(node)
    if c is not None:
        pk = cols + align_temp(K * OW * max(r for _, _, r in bands) * gtype.size)
        steps_.append(backend.launch(node, f"copy_{SUFFIX[a.type]}_{SUFFIX[gtype]}", pk, c, [(tensor_ptr(a), view)]))
    kmat = SimpleNamespace(ne=(K, CO, 1, 1), type=gtype)
    tf32 = gtype == F32 and backend.allow_tf32
    name = f"cublaslt_conv_{SUFFIX[a.type]}_{SUFFIX[b.type]}" + ("_tf32" if tf32 else "")
    pb, pd = tensor_ptr(b), tensor_ptr(node)
    img = SimpleNamespace(ne=b.ne, nb=b.nb)
    pos = _positions_first(node)
    calls = {}              # rows -> [(band index, (A, B, D) pointers)]: one Gemm per band height
    for j, (n, oh0, rows) in enumerate(bands):
        calls.setdefault(rows, []).append((j, (cols, pk, pd + n * node.nb[3] + oh0 * node.nb[1])))
    gemm_of = {}
    for rows, items in calls.items():
        P = OW * rows
        d = SimpleNamespace(ne=(P, CO, 1, 1), nb=(4, node.nb[2], 0, 0), type=F32)
        g = Gemm(backend, node, name, (cols, SimpleNamespace(ne=(K, P, 1, 1), type=gtype), (not pos, P if pos else K)),
                 (pk, kmat, (True, K)), CO, [p for _, p in items], 1, (0, 0, 0), tf32, temp, None, d)
        for i, (j, _) in enumerate(items):
            gemm_of[j] = g.at(i)
    for j, (n, oh0, rows) in enumerate(bands):
        band = SimpleNamespace(ne=(K, OW, rows, oh0), nb=(gtype.size, K * gtype.size, K * OW * gtype.size, 0),
                               nelements=K * OW * rows)
        steps_.append(backend.launch(node, f"im2col_{'pos' if pos else 'cf'}_{SUFFIX[b.type]}_{SUFFIX[gtype]}", cols,
                                     band, [(tensor_ptr(a), a), (pb + n * b.nb[3], img)], params(node),
                                     _im2col_config(pos, OW, rows, CI), 0 if pos else _cf_vector(b, pb),
                                     int_params(node)))
        steps_.append(gemm_of[j])
    return steps_


def dw_or_direct_steps(backend, node) -> list:
    """conv_2d_dw by conv_dw3_cwhn where it applies, else the op's one-thread-per-output kernel."""
    return dw_steps(backend, node) if dw_fast(node) is not None else [backend.launch_node(node)]


register(ops=("conv_2d",), source=source, refusal=refusal, kernel_name=kernel_name, params=params,
         int_params=int_params, launch_config=launch_config, temp_size=temp_size, steps=conv_2d_steps,
         impls=("implicit", "im2col", "direct", "cudnn"), choose=choose, accepts=accepts)
register(ops=("im2col", "conv_1d", "conv_2d_dw", "conv_transpose_2d"), source=source, refusal=refusal,
         kernel_name=kernel_name, params=params, int_params=int_params, launch_config=launch_config,
         steps=dw_or_direct_steps)
