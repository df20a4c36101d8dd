// argmax, top_k and argsort (kernels/topk.py): the best k elements of each row in the order of ggpy/ops/topk.py, as
// 64-bit keys (the value's bits made monotonic, high; 0xffffffff - index, low): larger values first, equal values by lower
// index, nan above every number, -0.0 as 0.0; all keys of a row differ, and 0 lies below every key.
//
// A pass takes the rows' elements (floats, or the keys a previous pass kept) in chunks of TOPK_CHUNK: block
// (row, chunk) keeps the best k of its chunk (k = 1: a block reduction; else a bitonic sort of the chunk in shared
// memory), and writes them as keys to dst[row][chunk][k], or, in the last pass (one chunk a row, a.iop = 1), their
// indices to the I32 result dst[row][k]. a.ip[0] = k, a.ip[1] = the elements of a row, a.ip[2] = the size of the sort:
// a power of two, TOPK_CHUNK or (one chunk a row) the first at least a.ip[1].
#include "common.cuh"

#define TOPK_CHUNK 2048
typedef unsigned long long u64;

__device__ __forceinline__ u64 topk_key(float v, i64 i, bool asc) {
    const unsigned u = __float_as_uint(v);
    const unsigned o = v != v ? 0xffffffffu : v == 0.0f ? 0x80000000u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)(asc ? ~o : o) << 32) | (u64)(0xffffffffu - (unsigned)i);
}
__device__ __forceinline__ int topk_index(u64 key) { return (int)(0xffffffffu - (unsigned)key); }

// element i of this block's row: a float of src0 (any strides; row coordinates from blockIdx.x; a.ip[3]: keys
// ordered by ascending value, argsort's, nan last) or a kept key
template <typename T> struct RowKeys {
    const char* x; i64 nb; bool asc;
    __device__ RowKeys(const Args& a) : asc(a.ip[3] != 0) {
        i64 r = blockIdx.x, c1 = r % a.ne0[1]; r /= a.ne0[1];
        x = a.src0 + c1 * a.nb0[1] + (r % a.ne0[2]) * a.nb0[2] + (r / a.ne0[2]) * a.nb0[3];
        nb = a.nb0[0];
    }
    __device__ u64 operator()(i64 i) const { return topk_key(to_f(*(const T*)(x + i * nb)), i, asc); }
};
template <> struct RowKeys<u64> {
    const u64* x;
    __device__ RowKeys(const Args& a) : x((const u64*)a.src0 + (i64)blockIdx.x * a.ip[1]) {}
    __device__ u64 operator()(i64 i) const { return x[i]; }
};

struct MaxKey { __device__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; } };

// the j-th best key of the chunk goes out (j < k)
__device__ __forceinline__ void topk_store(const Args& a, int j, u64 key) {
    const int k = a.ip[0];
    if (a.iop) ((int*)a.dst)[(i64)blockIdx.x * k + j] = topk_index(key);
    else ((u64*)a.dst)[((i64)blockIdx.x * gridDim.y + blockIdx.y) * k + j] = key;
}

// k = 1: the chunk's largest key
template <typename T> __device__ void best_of_chunk(const Args& a) {
    const RowKeys<T> row(a);
    const i64 start = (i64)blockIdx.y * TOPK_CHUNK, end = min(start + TOPK_CHUNK, (i64)a.ip[1]);
    u64 best = 0;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const u64 key = row(i);
        best = key > best ? key : best;
    }
    best = block_reduce(best, MaxKey(), (u64)0);
    if (threadIdx.x == 0) topk_store(a, 0, best);
}

// one compare-exchange of the bitonic network for element i holding v, its partner holding w: the lower element of
// the pair keeps the larger key in a descending run, the smaller in an ascending one
__device__ __forceinline__ u64 bitonic_keep(int i, int size, int stride, u64 v, u64 w) {
    const bool first = (i & stride) == 0, down = (i & size) == 0;     // the last run (size = N): all descending
    return first == down ? (v > w ? v : w) : (v < w ? v : w);
}

// k > 1: the chunk (padded with 0 to N = a.ip[2] >= 2 keys) sorted by descending key (bitonic), its first k out.
// Thread t holds elements t and t + N/2 in registers: stride N/2 compares them, strides below 32 go through warp
// shuffles (the partner t ^ stride is in the warp; threads past N/2 hold padding and shuffle only among themselves),
// the others through shared memory, a pair a thread.
template <typename T> __device__ void sort_chunk(const Args& a) {
    __shared__ u64 s[TOPK_CHUNK];
    const RowKeys<T> row(a);
    const i64 start = (i64)blockIdx.y * TOPK_CHUNK, n = (i64)a.ip[1];
    const int N = a.ip[2], H = N / 2, t = threadIdx.x;
    const bool holds = t < H;
    u64 v0 = holds && start + t < n ? row(start + t) : 0, v1 = holds && start + t + H < n ? row(start + t + H) : 0;
    bool shared = false;                          // the keys are in s (else in v0, v1)
    for (int size = 2; size <= N; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            if (stride == H || stride < 32) {     // in registers (s was synchronised after the last shared stage)
                if (shared) { if (holds) { v0 = s[t]; v1 = s[t + H]; } shared = false; }
            }
            if (stride == H) {                    // the last run's first stage: t against t + H, descending
                const u64 hi = v0 > v1 ? v0 : v1, lo = v0 > v1 ? v1 : v0;
                v0 = hi; v1 = lo;
            } else if (stride < 32) {
                const u64 w0 = __shfl_xor_sync(0xffffffffu, v0, stride), w1 = __shfl_xor_sync(0xffffffffu, v1, stride);
                v0 = bitonic_keep(t, size, stride, v0, w0);
                v1 = bitonic_keep(t + H, size, stride, v1, w1);
            } else {
                if (!shared) { if (holds) { s[t] = v0; s[t + H] = v1; } shared = true; __syncthreads(); }
                if (holds) {
                    const int i = 2 * t - (t & (stride - 1)), j = i + stride;     // i has bit `stride` clear
                    const u64 x = s[i], y = s[j];
                    s[i] = bitonic_keep(i, size, stride, x, y);
                    s[j] = bitonic_keep(j, size, stride, y, x);
                }
                __syncthreads();
            }
        }
    }
    if (!shared && holds) { s[t] = v0; s[t + H] = v1; }
    __syncthreads();
    for (int j = threadIdx.x; j < a.ip[0]; j += blockDim.x) topk_store(a, j, s[j]);
}

extern "C" __global__ void argmax_f32(const Args a) { grid_dependency(); best_of_chunk<float>(a); }
extern "C" __global__ void argmax_f16(const Args a) { grid_dependency(); best_of_chunk<half_t>(a); }
extern "C" __global__ void argmax_bf16(const Args a) { grid_dependency(); best_of_chunk<bf16_t>(a); }
extern "C" __global__ void argmax_keys(const Args a) { grid_dependency(); best_of_chunk<u64>(a); }
extern "C" __global__ void top_k_f32(const Args a) { grid_dependency(); sort_chunk<float>(a); }
extern "C" __global__ void top_k_f16(const Args a) { grid_dependency(); sort_chunk<half_t>(a); }
extern "C" __global__ void top_k_bf16(const Args a) { grid_dependency(); sort_chunk<bf16_t>(a); }
extern "C" __global__ void top_k_keys(const Args a) { grid_dependency(); sort_chunk<u64>(a); }
