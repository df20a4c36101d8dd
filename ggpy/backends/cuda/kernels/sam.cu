// SAM's window and relative-position ops: win_part, win_unpart (and their 4-channel win_vec), get_rel_pos,
// add_rel_pos (kernels/sam.py).
#include "common.cuh"

// win_part: src0 (C, W, H, B) -> dst (C, w, w, B * nwin), nwin = npx * npy windows per image;
// window b * nwin + py * npx + px, zeros past the image
template <typename T, typename I> __device__ void win_part_i(const Args& a) {
    const I w = (I)a.ne[1], npx = ((I)a.ne0[1] + w - 1) / w, nwin = npx * (((I)a.ne0[2] + w - 1) / w);
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I b = c[3] / nwin, p = c[3] % nwin, x = (p % npx) * w + c[1], y = (p / npx) * w + c[2];
        float v = 0.f;
        if (x < (I)a.ne0[1] && y < (I)a.ne0[2])
            v = to_f(*(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + x * (I)a.nb0[1] + y * (I)a.nb0[2] + b * (I)a.nb0[3])));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(v);
    }
}
template <typename T> __device__ void win_part(const Args& a) { DISPATCH_I(a, win_part_i, T); }

// win_unpart: src0 (C, w, w, B * nwin) -> dst (C, W, H, B), the inverse of win_part
template <typename T, typename I> __device__ void win_unpart_i(const Args& a) {
    const I w = (I)a.ne0[1], npx = ((I)a.ne[1] + w - 1) / w, nwin = npx * (((I)a.ne[2] + w - 1) / w);
    FOR_EACH_ELEMENT_I(a, i, I) {
        I c[4];
        unravel(i, a.ne, c);
        const I p = c[3] * nwin + (c[2] / w) * npx + c[1] / w;
        const T v = *(const T*)(a.src0 + (c[0] * (I)a.nb0[0] + (c[1] % w) * (I)a.nb0[1] + (c[2] % w) * (I)a.nb0[2]
                                          + p * (I)a.nb0[3]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = v;
    }
}
template <typename T> __device__ void win_unpart(const Args& a) { DISPATCH_I(a, win_unpart_i, T); }
// win_part / win_unpart four channels a thread (win_steps: C % 4 == 0, channels contiguous, rows 4-element aligned,
// dst contiguous, 32-bit offsets): thread i moves the windowed tensor's elements 4 i .. 4 i + 3
template <typename T, bool PART> __device__ void win_vec(const Args& a) {
    const i64* win = PART ? a.ne : a.ne0;                  // (C, w, w, B * nwin)
    const i64* img = PART ? a.ne0 : a.ne;                  // (C, W, H, B)
    const i64* inb = PART ? a.nb0 : a.nb;
    const unsigned C4 = (unsigned)win[0] / 4, w = (unsigned)win[1], W = (unsigned)img[1], H = (unsigned)img[2];
    const unsigned npx = (W + w - 1) / w, nwin = npx * ((H + w - 1) / w), n = (unsigned)(win[0] * win[1] * win[2] * win[3]) / 4;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned r = i / C4;
        const unsigned c4 = i - r * C4, tx = r % w; r /= w;
        const unsigned ty = r % w, q = r / w, b = q / nwin, p = q % nwin, x = (p % npx) * w + tx, y = (p / npx) * w + ty;
        const unsigned off = c4 * 4 * sizeof(T) + x * (unsigned)inb[1] + y * (unsigned)inb[2] + b * (unsigned)inb[3];
        if (PART) {
            const float4 v = x < W && y < H ? load4<T>(a.src0 + off) : make_float4(0.f, 0.f, 0.f, 0.f);
            store4<T>(a.dst + (size_t)i * 4 * sizeof(T), v);
        } else if (x < W && y < H) {
            store4<T>(a.dst + off, load4<T>(a.src0 + (size_t)i * 4 * sizeof(T)));
        }
    }
}
// dst (C, kh, qh): dst[q, k, :] = a[(kh - 1 - k) + q, :]
template <typename T> __device__ void get_rel_pos_k(const Args& a) {
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        i64 s[4] = {c[0], a.ne[1] - 1 - c[1] + c[2], 0, 0};
        *(T*)(a.dst + byte_offset(c, a.nb)) = *(const T*)(a.src0 + byte_offset(s, a.nb0));
    }
}
// dst = a + ph[kh, qw, qh, b] + pw[kw, qw, qh, b] with a (K*K, QW*QH, ...) = (kw + K kh, qw + QW qh, b); src1 = pw
template <typename T, typename P> __device__ void add_rel_pos_k(const Args& a, const char* ph) {
    const i64 k = a.ne1[0], qw = a.ne1[1];
    FOR_EACH_ELEMENT(a, i) {
        i64 c[4]; unravel(i, a.ne, c);
        const i64 b = c[2] + c[3] * a.ne[2];
        const i64 q[4] = {0, c[1] % qw, c[1] / qw, b};
        const i64 base = q[1] * a.nb1[1] + q[2] * a.nb1[2] + q[3] * a.nb1[3];
        float w = to_f(*(const P*)(a.src1 + base + (c[0] % k) * a.nb1[0]));
        float h = to_f(*(const P*)(ph + base + (c[0] / k) * a.nb1[0]));
        *(T*)(a.dst + byte_offset(c, a.nb)) = from_f<T>(to_f(*(const T*)(a.src0 + byte_offset(c, a.nb0))) + h + w);
    }
}

extern "C" __global__ void win_part_f32(const Args a) { grid_dependency(); win_part<float>(a); }
extern "C" __global__ void win_unpart_f32(const Args a) { grid_dependency(); win_unpart<float>(a); }
extern "C" __global__ void get_rel_pos_f32(const Args a) { grid_dependency(); get_rel_pos_k<float>(a); }
extern "C" __global__ void win_part_v_f32(const Args a) { grid_dependency(); win_vec<float, true>(a); }
extern "C" __global__ void win_unpart_v_f32(const Args a) { grid_dependency(); win_vec<float, false>(a); }
extern "C" __global__ void add_rel_pos_f32_f32(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<float, float>(a, ph); }
extern "C" __global__ void add_rel_pos_f32_f16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<float, half_t>(a, ph); }
extern "C" __global__ void add_rel_pos_f32_bf16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<float, bf16_t>(a, ph); }
extern "C" __global__ void win_part_f16(const Args a) { grid_dependency(); win_part<half_t>(a); }
extern "C" __global__ void win_unpart_f16(const Args a) { grid_dependency(); win_unpart<half_t>(a); }
extern "C" __global__ void get_rel_pos_f16(const Args a) { grid_dependency(); get_rel_pos_k<half_t>(a); }
extern "C" __global__ void win_part_v_f16(const Args a) { grid_dependency(); win_vec<half_t, true>(a); }
extern "C" __global__ void win_unpart_v_f16(const Args a) { grid_dependency(); win_vec<half_t, false>(a); }
extern "C" __global__ void add_rel_pos_f16_f32(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<half_t, float>(a, ph); }
extern "C" __global__ void add_rel_pos_f16_f16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<half_t, half_t>(a, ph); }
extern "C" __global__ void add_rel_pos_f16_bf16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<half_t, bf16_t>(a, ph); }
extern "C" __global__ void win_part_bf16(const Args a) { grid_dependency(); win_part<bf16_t>(a); }
extern "C" __global__ void win_unpart_bf16(const Args a) { grid_dependency(); win_unpart<bf16_t>(a); }
extern "C" __global__ void get_rel_pos_bf16(const Args a) { grid_dependency(); get_rel_pos_k<bf16_t>(a); }
extern "C" __global__ void win_part_v_bf16(const Args a) { grid_dependency(); win_vec<bf16_t, true>(a); }
extern "C" __global__ void win_unpart_v_bf16(const Args a) { grid_dependency(); win_vec<bf16_t, false>(a); }
extern "C" __global__ void add_rel_pos_bf16_f32(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<bf16_t, float>(a, ph); }
extern "C" __global__ void add_rel_pos_bf16_f16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<bf16_t, half_t>(a, ph); }
extern "C" __global__ void add_rel_pos_bf16_bf16(const Args a, const char* ph) { grid_dependency(); add_rel_pos_k<bf16_t, bf16_t>(a, ph); }
