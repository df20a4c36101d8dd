// rope (ggml_rope_ext): one thread per pair of a row, normal or NEOX pairs, the angle in double (kernels/rope.py);
// rope_set_rows: the rotated rows written into rows of a cache (the rope_set_rows pattern); rope_kv: a q rope, a k
// rope into the K cache and v's rows into the V cache at the same indices in one launch (the rope_kv pattern).
#include "rope.cuh"

// rope_set_rows' destination rows: token t's rotated (hd, heads) go to row idx[t] (I32, byte stride idx_nb) of `rows`
// rows (out-of-range indices are skipped) at a.dst + idx[t] * a.nb[2] + h * a.nb[1] + i * a.nb[0]
struct RowsArgs { Args a; const char* idx; i64 idx_nb; i64 rows; };

__device__ __forceinline__ i64 rope_units(const Args& a) { return (a.ne[0] + 1) / 2 * a.ne[1] * a.ne[2] * a.ne[3]; }

// unit u (a pair) of a rope. a.src1: I32 positions (ne1[0] of them), the angle's parameters as rope_cos_sin takes
// them (rope.cuh); iop: NEOX pairs. dst of D (the source's type T unless SET: rows of a cache, RowsArgs)
template <typename T, typename D, bool SET> __device__ void rope_unit(const Args& a, const RowsArgs* r, i64 u) {
    const int n_dims = a.ip[0], half = n_dims / 2;
    const i64 units = (a.ne[0] + 1) / 2, j = u % units;
    i64 q = u / units, c[4];
    c[0] = 0; c[1] = q % a.ne[1]; q /= a.ne[1]; c[2] = q % a.ne[2]; c[3] = q / a.ne[2];
    const char* x = a.src0 + byte_offset(c, a.nb0);
    char* y = a.dst + byte_offset(c, a.nb);
    if (SET) {
        const i64 row = *(const int*)(r->idx + c[2] * r->idx_nb);
        if (row < 0 || row >= r->rows) return;
        y = a.dst + c[1] * a.nb[1] + row * a.nb[2];
    }
    if (j >= half) {
        for (i64 k = 2 * j; k < 2 * j + 2 && k < a.ne[0]; ++k) *(D*)(y + k * a.nb[0]) = convert<D>(*(const T*)(x + k * a.nb0[0]));
        return;
    }
    float cs, sn;
    rope_cos_sin(a, *(const int*)(a.src1 + c[2] * a.nb1[0]), j, cs, sn);
    const i64 k0 = a.iop ? j : 2 * j, k1 = a.iop ? j + half : 2 * j + 1;
    const float x0 = to_f(*(const T*)(x + k0 * a.nb0[0])), x1 = to_f(*(const T*)(x + k1 * a.nb0[0]));
    *(D*)(y + k0 * a.nb[0]) = from_f<D>(x0 * cs - x1 * sn);
    *(D*)(y + k1 * a.nb[0]) = from_f<D>(x0 * sn + x1 * cs);
}

template <typename T, typename D, bool SET> __device__ void rope_k(const Args& a, const RowsArgs* r = nullptr) {
    for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x, n = rope_units(a); u < n; u += (i64)gridDim.x * blockDim.x)
        rope_unit<T, D, SET>(a, r, u);
}

// rope_kv: the q rope (q), the k rope into the K cache (k) and v's F32 rows (v.src0, ne0 (X, n)) into the V cache
// (v.dst, v.ne[1] rows) at k's indices: a thread per pair of q, then of k, then per element of v
struct KvArgs { Args q; RowsArgs k; Args v; };
template <typename D> __device__ void rope_kv_k(const KvArgs& a) {
    const i64 uq = rope_units(a.q), uk = uq + rope_units(a.k.a), n = uk + a.v.ne0[0] * a.v.ne0[1];
    for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (i64)gridDim.x * blockDim.x) {
        if (u < uq) { rope_unit<float, float, false>(a.q, nullptr, u); continue; }
        if (u < uk) { rope_unit<float, D, true>(a.k.a, &a.k, u - uq); continue; }
        const i64 i = u - uk, t = i / a.v.ne0[0], c = i % a.v.ne0[0];
        const i64 row = *(const int*)(a.k.idx + t * a.k.idx_nb);
        if (row >= 0 && row < a.v.ne[1])
            *(D*)(a.v.dst + row * a.v.nb[1] + c * a.v.nb[0]) = from_f<D>(*(const float*)(a.v.src0 + t * a.v.nb0[1] + c * a.v.nb0[0]));
    }
}

extern "C" __global__ void rope_f32(const Args a) { grid_dependency(); rope_k<float, float, false>(a); }
extern "C" __global__ void rope_f16(const Args a) { grid_dependency(); rope_k<half_t, half_t, false>(a); }
extern "C" __global__ void rope_bf16(const Args a) { grid_dependency(); rope_k<bf16_t, bf16_t, false>(a); }
extern "C" __global__ void rope_set_rows_f32_f32(const RowsArgs r) { grid_dependency(); rope_k<float, float, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_f32_f16(const RowsArgs r) { grid_dependency(); rope_k<float, half_t, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_f32_bf16(const RowsArgs r) { grid_dependency(); rope_k<float, bf16_t, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_f16_f32(const RowsArgs r) { grid_dependency(); rope_k<half_t, float, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_f16_f16(const RowsArgs r) { grid_dependency(); rope_k<half_t, half_t, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_f16_bf16(const RowsArgs r) { grid_dependency(); rope_k<half_t, bf16_t, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_bf16_f32(const RowsArgs r) { grid_dependency(); rope_k<bf16_t, float, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_bf16_f16(const RowsArgs r) { grid_dependency(); rope_k<bf16_t, half_t, true>(r.a, &r); }
extern "C" __global__ void rope_set_rows_bf16_bf16(const RowsArgs r) { grid_dependency(); rope_k<bf16_t, bf16_t, true>(r.a, &r); }
extern "C" __global__ void rope_kv_f32(const KvArgs a) { grid_dependency(); rope_kv_k<float>(a); }
extern "C" __global__ void rope_kv_f16(const KvArgs a) { grid_dependency(); rope_kv_k<half_t>(a); }
extern "C" __global__ void rope_kv_bf16(const KvArgs a) { grid_dependency(); rope_kv_k<bf16_t>(a); }
