"""ggpy's own single-threaded sgemm, called from ggpy's workers like BLAS sgemm (blas.py):

    C (m x n, column-major, ldc) = A (m x k, column-major, lda) @ w^T,  w (n, k) with any strides

(w is a conv kernel (OC, IC * KH * KW) as it lies in memory; A the input's positions by channels, or the
im2col matrix). It is the BLIS loop nest: w is packed in panels of NR columns, A in blocks of MC rows
(micro-panels of MR rows, at most KC deep), and the micro-kernel keeps an MR x NR tile of C in vector
registers while it streams one A and one w micro-panel. The micro-kernel is written in LLVM IR (<W x float>
loads, broadcasts and llvm.fma), so the accumulators stay in registers whatever numba's loop vectoriser does.

Why not OpenBLAS: on this project's CPU (Zen 4, AVX-512) OpenBLAS's sgemm reaches 90-98 GFLOP/s per core on
the 1x1 conv of issue 3 (4096 x 256 x 320); this micro-kernel runs at ~115 from L1 and the whole product at
~100-105. `available()` says whether the host has the vector width the tile is sized for (AVX-512, or AVX2
with FMA); callers fall back to BLAS otherwise.

Scratch, one block per worker from the allocator's temp heap (scratch_floats): the packed w (k x NC), the
packed A block (MC x KC) and one MR x NR edge tile.
"""
import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .common import scalar


def _host_tile():
    """(vectors per column MV, columns NR, lanes W) of the micro-tile: 2 x 8 zmm accumulators with AVX-512
    (32 rows by 8 columns: channel and feature counts are mostly multiples of both; 3 x 8 and 2 x 12 measured
    the same), 2 x 6 ymm with AVX2 (16 registers); None without FMA vectors."""
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    if features.get("avx512f") and features.get("fma"):
        return 2, 8, 16
    if features.get("avx2") and features.get("fma"):
        return 2, 6, 8
    return None


_TILE = _host_tile()
MV, NR, W = _TILE or (2, 6, 8)
MR = MV * W
MC = 192
"""Rows of A packed at a time (a multiple of MR: 6 micro-panels with AVX-512, 12 with AVX2)."""
KC = 384
"""Deepest packed block: a longer k is cut into equal blocks of at most KC (C accumulates across them)."""
B_PANEL_FLOATS = 256 * 1024
"""Packed B per worker (1 MiB): columns are taken NC at a time so that k * NC stays under it."""


def available() -> bool:
    return _TILE is not None


def panel_bytes(floats: int, n_workers: int, budget: int) -> int:
    """Bytes of one worker's panels (`floats`, rounded to 64 bytes) when a node's products should run on this
    GEMM, else 0 (BLAS then): the host lacks the tile's vector width, or the workers' panels would take more
    than half of `budget`."""
    per_worker = (floats * 4 + 63) // 64 * 64
    return per_worker if available() and 2 * n_workers * per_worker <= budget else 0


@scalar
def _round16(n):
    return (n + 15) // 16 * 16


@scalar
def _column_block(k):
    """NC: columns of B packed at once for depth k (a multiple of NR)."""
    return max(NR, B_PANEL_FLOATS // max(k, 1) // NR * NR)


@scalar
def _scratch_parts(m, n, k):
    """Floats of (packed B, packed A block, edge tile) for an m x n x k product, each rounded to 64 bytes."""
    nc = min(_column_block(k), (n + NR - 1) // NR * NR)
    mc = min(MC, (m + MR - 1) // MR * MR)
    return _round16(k * nc), _round16(mc * min(KC, k)), _round16(MR * NR)


def scratch_floats(m: int, n: int, k: int) -> int:
    """Floats of temp one worker needs for gemm() on an m x n x k product."""
    return sum(_scratch_parts(m, n, k))


@scalar
def gemm(c_ptr, ldc, a_ptr, lda, m, w, scratch, w_packed):
    """C (m x n, column-major, ldc floats) = A (m x k, column-major, lda floats) @ w^T, w (n, k) any strides;
    C and A are integer addresses, scratch this worker's float32 block of at least scratch_floats(m, n, k).
    A is packed MC x KC at a time as it is used. w_packed: the previous call on this scratch had the same w
    (its panels are reused when they hold all of it)."""
    n, k = w.shape
    if _zero_depth(c_ptr, ldc, m, n, k):
        return
    b_size, a_size, t_size = _scratch_parts(m, n, k)
    if scratch.size < b_size + a_size + t_size:
        raise ValueError("gemm: scratch smaller than scratch_floats(m, n, k)")
    bp = scratch[:b_size]
    ap = scratch[b_size:b_size + a_size]
    tile = scratch[b_size + a_size:b_size + a_size + t_size]
    _loop_nest(c_ptr, ldc, m, w, w_packed, bp, tile, ap, a_ptr, lda)


@scalar
def _loop_nest(c_ptr, ldc, m, w, w_packed, bp, tile, ap, a_ptr, lda):
    """The BLIS loop nest: w's columns NC at a time (packed into bp, unless w_packed and bp holds all of w),
    A's rows MC at a time, k in blocks, then _panel_product. a_ptr != 0: A is column-major at a_ptr (lda floats), packed into ap block by block;
    a_ptr == 0: ap already holds all of A, packed by pack_a_rows."""
    n, k = w.shape
    count, depth = _k_blocks(k)
    nc = _column_block(k)
    for n0 in range(0, n, nc):
        nb = min(nc, n - n0)
        if not w_packed or nb < n:
            pack_b(bp, w, n0, nb)
        for i0 in range(0, m, MC):
            mb = min(MC, m - i0)
            rows = (mb + MR - 1) // MR * MR
            b_at = bp.ctypes.data
            for blk in range(count):
                k0 = blk * depth
                kc = min(depth, k - k0)
                a_at = ap.ctypes.data + (i0 * k + rows * k0) * 4
                if a_ptr:
                    _pack_a(ap, a_ptr + i0 * 4, lda, mb, k0, kc)
                    a_at = ap.ctypes.data
                _panel_product(c_ptr + (i0 + n0 * ldc) * 4, ldc, a_at, mb, kc, b_at, nb, tile, blk)
                b_at += (nb + NR - 1) // NR * NR * kc * 4


@scalar
def packed_a_floats(m, k):
    """Floats pack_a_rows writes for an (m, k) matrix, rounded to 64 bytes."""
    return _round16((m + MR - 1) // MR * MR * k)


def prepacked_floats(m: int, n: int, k: int) -> int:
    """Floats of temp one worker needs for pack_a_rows + gemm_prepacked on m x n x k: the packed A, then the
    `rest` (packed w and the edge tile)."""
    b_size, _, t_size = _scratch_parts(m, n, k)
    return packed_a_floats(m, k) + b_size + t_size


@scalar
def pack_a_rows(ap, a):
    """Pack all of A (a: (m, k), any strides) for gemm_prepacked: blocks of MC rows, each cut into k blocks
    of micro-panels (MR rows, k-major, the last zero-padded); block i0 starts at float i0 * k."""
    for r0 in range(0, a.shape[0], MR):
        pack_a_micro(ap, a[r0:r0 + MR], r0, a.shape[0])


@scalar
def pack_a_micro(ap, rows, r0, m):
    """Pack `rows` (at most MR rows (n, k), any strides) as rows r0 .. r0 + MR of an (m, k) A that pack_a_rows packs
    (a caller can produce A's rows a micro-panel at a time, in cache)."""
    k = rows.shape[1]
    count, depth = _k_blocks(k)
    i0 = r0 // MC * MC
    block_rows = (min(MC, m - i0) + MR - 1) // MR * MR
    for blk in range(count):
        k0 = blk * depth
        kc = min(depth, k - k0)
        pack_rows(ap, i0 * k + block_rows * k0 + (r0 - i0) * kc, MR, rows, 0, rows.shape[0], k0, kc)


@scalar
def gemm_prepacked(c_ptr, ldc, m, ap, w, rest):
    """C (m x n, column-major, ldc floats, integer address) = A @ w^T, A packed by pack_a_rows into ap, w (n, k)
    any strides; rest: this worker's other prepacked_floats (packed w and the edge tile)."""
    n, k = w.shape
    if _zero_depth(c_ptr, ldc, m, n, k):
        return
    b_size, _, t_size = _scratch_parts(m, n, k)
    if rest.size < b_size + t_size or ap.size < packed_a_floats(m, k):
        raise ValueError("gemm_prepacked: scratch smaller than prepacked_floats(m, n, k)")
    _loop_nest(c_ptr, ldc, m, w, False, rest[:b_size], rest[b_size:b_size + t_size], ap, 0, 0)


@scalar
def _zero_depth(c_ptr, ldc, m, n, k):
    """With k == 0, C = 0; True when there is nothing (more) to multiply."""
    if k == 0:
        for j in range(n):
            _c_column(c_ptr + j * ldc * 4, m)[:] = 0.0
    return m == 0 or n == 0 or k == 0


@intrinsic
def _copy_bytes(typingctx, dst, src, nbytes):
    """memcpy(dst, src, nbytes) between integer addresses (unrolled into vector moves for a constant size)."""
    def codegen(context, builder, sig, args):
        dst, src, nbytes = args
        cgutils.raw_memcpy(builder, builder.inttoptr(dst, cgutils.voidptr_t), builder.inttoptr(src, cgutils.voidptr_t),
                           nbytes, 1)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp), codegen


@intrinsic
def _transpose8(typingctx, dst, dst_stride, src, src_stride):
    """dst row c (8 floats at dst + c * dst_stride bytes) = column c of the 8 x 8 float block whose row r is at
    src + r * src_stride: 8 vector loads, three stages of shuffles (each swaps one bit of the row and column
    index), 8 vector stores."""
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, 8)

    def codegen(context, builder, sig, args):
        dst, dst_stride, src, src_stride = args
        rows = [builder.load(builder.inttoptr(builder.add(src, builder.mul(src_stride, ir.Constant(src.type, r))),
                                              vec.as_pointer()), align=4) for r in range(8)]
        for bit in (1, 2, 4):
            out = []
            for r in range(8):
                low = r & ~bit
                mask = [((c & ~bit) | (r & bit)) + (8 if c & bit else 0) for c in range(8)]
                out.append(builder.shuffle_vector(rows[low], rows[low | bit],
                                                  ir.Constant(ir.VectorType(ir.IntType(32), 8), mask)))
            rows = out
        for c in range(8):
            ptr = builder.inttoptr(builder.add(dst, builder.mul(dst_stride, ir.Constant(dst.type, c))),
                                   vec.as_pointer())
            builder.store(rows[c], ptr, align=4)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp, types.intp), codegen


@intrinsic
def micro_kernel(typingctx, a_ptr, lda, b_ptr, c_ptr, ldc, kc, accumulate):
    """C tile (MR x NR, column-major, ldc) (+)= A micro-panel (kc x MR, k-major, lda floats from one k to the next:
    MR when packed) @ B micro-panel (kc x NR, k-major); C is added to when accumulate != 0. Pointers are integer
    addresses."""
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, W)
    i32 = ir.IntType(32)

    def codegen(context, builder, sig, args):
        ap, lda, bp, cp, ldc, kc, accumulate = args
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                             f"llvm.fma.v{W}f32")
        a = builder.inttoptr(ap, f32.as_pointer())
        b = builder.inttoptr(bp, f32.as_pointer())
        c = builder.inttoptr(cp, f32.as_pointer())
        idx = lambda v: ir.Constant(ldc.type, v)
        zero = ir.Constant(vec, [0.0] * W)
        acc = [cgutils.alloca_once_value(builder, zero) for _ in range(MV * NR)]
        splat = ir.Constant(ir.VectorType(i32, W), [0] * W)
        with cgutils.for_range(builder, kc) as loop:
            a_k = builder.gep(a, [builder.mul(loop.index, lda)])
            b_k = builder.gep(b, [builder.mul(loop.index, idx(NR))])
            a_vecs = [builder.load(builder.bitcast(builder.gep(a_k, [idx(i * W)]), vec.as_pointer()), align=4)
                      for i in range(MV)]
            for j in range(NR):
                s = builder.load(builder.gep(b_k, [idx(j)]))
                bj = builder.shuffle_vector(builder.insert_element(ir.Constant(vec, ir.Undefined), s,
                                                                   ir.Constant(i32, 0)),
                                            ir.Constant(vec, ir.Undefined), splat)
                for i in range(MV):
                    builder.store(builder.call(fma, [a_vecs[i], bj, builder.load(acc[j * MV + i])]),
                                  acc[j * MV + i])
        add = builder.icmp_signed("!=", accumulate, ir.Constant(accumulate.type, 0))
        for j in range(NR):
            col = builder.gep(c, [builder.mul(ldc, idx(j))])
            for i in range(MV):
                ptr = builder.bitcast(builder.gep(col, [idx(i * W)]), vec.as_pointer())
                value = builder.load(acc[j * MV + i])
                builder.store(builder.select(add, builder.fadd(value, builder.load(ptr, align=4)), value), ptr,
                              align=4)
        return context.get_dummy_value()
    return types.void(*[types.intp] * 7), codegen


@scalar
def _k_blocks(k):
    """(count, depth) of the equal k blocks (the last may be shorter)."""
    count = (k + KC - 1) // KC
    return count, (k + count - 1) // count


@scalar
def pack_b(bp, w, n0, nb):
    """Pack columns n0 .. n0+nb of B (B[kk, j] = w[j, kk]; w is (n, k), any strides) into bp: per k block,
    panels of NR columns, each k-major (NR values per kk), zero-padded to whole panels."""
    k = w.shape[1]
    count, depth = _k_blocks(k)
    panels = (nb + NR - 1) // NR
    base = 0
    for blk in range(count):
        k0 = blk * depth
        kc = min(depth, k - k0)
        for jp in range(panels):
            pack_rows(bp, base + jp * kc * NR, NR, w, n0 + jp * NR, min(NR, nb - jp * NR), k0, kc)
        base += panels * kc * NR


@scalar
def pack_rows(dst, at, width, src, r0, rows, k0, kc):
    """dst[at + kk * width + i] = src[r0 + i, k0 + kk] for i < width (0 for i >= rows), kk < kc: `rows` rows of
    src (any strides) transposed into a k-major panel `width` wide. Where src's rows are unit stride, whole
    8 x 8 blocks go through vector transposes."""
    fast_rows = rows // 8 * 8 if src.strides[1] == 4 else 0
    kc8 = kc // 8 * 8
    d, s, rs = dst.ctypes.data, src.ctypes.data, src.strides[0]
    for g in range(0, fast_rows, 8):
        for kk0 in range(0, kc8, 8):
            _transpose8(d + (at + kk0 * width + g) * 4, width * 4, s + (r0 + g) * rs + (k0 + kk0) * 4, rs)
    for i in range(width):
        if i < rows:
            for kk in range(kc8 if i < fast_rows else 0, kc):
                dst[at + kk * width + i] = src[r0 + i, k0 + kk]
        else:
            for kk in range(kc):
                dst[at + kk * width + i] = 0.0


@scalar
def _pack_a(ap, a_ptr, lda, m, k0, kc):
    """Pack rows 0 .. m of columns k0 .. k0+kc of A (A[i, kk] at float a_ptr[i + kk * lda]) into ap as
    micro-panels of MR rows, each k-major, the last zero-padded."""
    dst = ap.ctypes.data
    full = m // MR
    for kk in range(kc):
        src = a_ptr + (k0 + kk) * lda * 4
        for ip in range(full):
            _copy_bytes(dst + (ip * kc + kk) * MR * 4, src + ip * MR * 4, MR * 4)
    rest = m - full * MR
    if rest:
        base = full * kc * MR
        for kk in range(kc):
            at = base + kk * MR
            _copy_bytes(dst + at * 4, a_ptr + ((k0 + kk) * lda + full * MR) * 4, rest * 4)
            ap[at + rest: at + MR] = 0.0


@scalar
def _panel_product(c_ptr, ldc, a_at, mb, kc, b_at, nb, tile, accumulate):
    """C[:mb, :nb] (+)= packed A block (micro-panels of MR rows, kc deep, at address a_at) @ packed B block
    (panels of NR columns, kc deep, at b_at); C at c_ptr (column-major, ldc); edge tiles through `tile`."""
    t_at = tile.ctypes.data
    for jp in range((nb + NR - 1) // NR):
        j0 = jp * NR
        b_panel = b_at + jp * kc * NR * 4
        for ip in range((mb + MR - 1) // MR):
            r0 = ip * MR
            a_panel = a_at + ip * kc * MR * 4
            c_tile = c_ptr + (r0 + j0 * ldc) * 4
            if r0 + MR <= mb and j0 + NR <= nb:
                micro_kernel(a_panel, MR, b_panel, c_tile, ldc, kc, accumulate)
            else:
                micro_kernel(a_panel, MR, b_panel, t_at, MR, kc, 0)
                _add_tile(tile, c_tile, ldc, min(MR, mb - r0), min(NR, nb - j0), accumulate)


@scalar
def _add_tile(tile, c_ptr, ldc, rows, cols, accumulate):
    """C[:rows, :cols] (+)= the edge tile (MR x NR, column-major)."""
    for j in range(cols):
        col = _c_column(c_ptr + j * ldc * 4, rows)
        for i in range(rows):
            col[i] = tile[j * MR + i] + (col[i] if accumulate else np.float32(0.0))


@intrinsic
def _c_column(typingctx, ptr, n):
    """A 1-d float32 array of n values at integer address ptr (no ownership)."""
    arr_t = types.Array(types.float32, 1, "C")

    def codegen(context, builder, sig, args):
        ptr, n = args
        ary = context.make_array(arr_t)(context, builder)
        data = builder.inttoptr(ptr, ary.data.type)
        itemsize = context.get_constant(types.intp, 4)
        context.populate_array(ary, data=data, shape=[n], strides=[itemsize], itemsize=itemsize,
                               meminfo=None)
        return ary._getvalue()
    return arr_t(types.intp, types.intp), codegen
