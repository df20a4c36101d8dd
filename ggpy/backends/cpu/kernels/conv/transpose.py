"""2D transposed convolution (ggml_conv_transpose_2d_p0) on the CPU.

Arrays arrive in reversed ne order: kernel a (Cin, Cout, KH, KW), input b (N, Cin, H, W), output
d (N, Cout, OH, OW), OH = (H - 1) * stride + KH. Two implementations, chosen per node (or forced with
CPUBackend(force={"conv_transpose_2d": impl})):

gemm    every input pixel's output patch at once: cols (Cout * KH * KW, positions) = a^T @ x_n into the temp
        block, then scattered (added) into the output (col2im). The product runs on ggpy's own GEMM (gemm.py,
        from a^T transposed once per evaluation into the temp block, with each worker's panels) where the
        host has its vector width and the budget room, else on single-threaded BLAS sgemm.
        Workers own disjoint output channels, so no two add into the same pixel; positions go in chunks
        so that the temp block stays under backend.scratch_budget.
direct  output row by row, each a sum of strided input rows times kernel taps: no scratch; chosen for
        few input channels, where a GEMM has too little depth to pay off.
An F16 kernel, or an input sgemm cannot read in place, is first widened to contiguous F32 in the temp block.
"""
import numpy as np

from ...registry import BoundNode, register
from .. import gemm as own_gemm
from ..blas import SGEMM_ADDRESS, sgemm
from ..common import block, kernel, launch, row_index, scalar
from ..fp16 import load
from ..convert import copy_transposed
from .dense import aligned, then, widen, worker_panels
from .depthwise import axpy

GEMM_MIN_CIN = 8
"""Input channels (the GEMM's depth) from which `gemm` is chosen."""
COLS_PER_WORKER = 1 << 16
"""Most floats of patches a worker computes at a time (256 KiB: the block stays in cache until scattered)."""

_ZERO = np.float32(0.0)


# -- direct ---------------------------------------------------------------------------------------------
@kernel
def direct_rows(d, a, b, stride, ith, nth):
    """Worker ith's output rows: row oy gathers input rows iy with iy * stride + ky = oy, each spread over
    columns ix * stride + kx."""
    nco, oh = d.shape[1], d.shape[2]
    nci, h, w = b.shape[1], b.shape[2], b.shape[3]
    kh, kw = a.shape[2], a.shape[3]
    r0, r1 = block(d.shape[0] * nco * oh, ith, nth)
    for r in range(r0, r1):
        n, co, oy = row_index(r, nco, oh)
        drow = d[n, co, oy]
        drow[:] = _ZERO
        for ky in range(kh):
            iy = (oy - ky) // stride
            if (oy - ky) % stride != 0 or iy < 0 or iy >= h:
                continue
            for ci in range(nci):
                brow = b[n, ci, iy]
                for kx in range(kw):
                    axpy(drow[kx:kx + stride * (w - 1) + 1:stride], brow, load(a[ci, co, ky, kx]))


# -- gemm -----------------------------------------------------------------------------------------------
@scalar
def _scatter(d, cols, n, c, cb, p0, pc, w, kh, kw, stride):
    """d[n, c + co, iy * stride + ky, ix * stride + kx] += cols[((co * KH + ky) * KW + kx) * pc + p] for the
    pc positions p0 + p = iy * W + ix of the chunk, runs of one input row at a time."""
    for co in range(cb):
        plane = d[n, c + co]
        for ky in range(kh):
            for kx in range(kw):
                col = cols[((co * kh + ky) * kw + kx) * pc:((co * kh + ky) * kw + kx + 1) * pc]
                p = 0
                while p < pc:
                    iy = (p0 + p) // w
                    ix0 = p0 + p - iy * w
                    cnt = min(pc - p, w - ix0)
                    row = plane[iy * stride + ky]
                    x0 = ix0 * stride + kx
                    for t in range(cnt):
                        row[x0 + t * stride] += col[p + t]
                    p += cnt


@kernel
def gemm_rows(fn, d, a, a_t, b, ldx, cols, cap, stride, scratch, ith, nth):
    """Worker ith's block of (image, output channel) pairs: for each image, its output channels in groups of
    cb and its positions in chunks of pc (cb * KH * KW * pc <= cap floats of `cols`), zero the channels,
    then cols = a[:, group]^T @ x_n[:, chunk] and scatter. a: contiguous F32 (Cin, Cout, KH, KW); a_t: a as
    (Cout * KH * KW, Cin) contiguous, for the own GEMM when the worker has scratch (nth, floats) for its
    panels, else BLAS sgemm reads a; b: F32, image n's plane read in place as (Cin, H * W) with row stride
    ldx floats."""
    nco = d.shape[1]
    nci, h, w = b.shape[1], b.shape[2], b.shape[3]
    kh, kw = a.shape[2], a.shape[3]
    kk = kh * kw
    positions = h * w
    mine = cols[ith * cap:(ith + 1) * cap]
    panels = scratch[ith]
    work = np.empty(10, np.int32)
    q0, q1 = block(d.shape[0] * nco, ith, nth)
    q = q0
    while q < q1:
        n = q // nco
        c_end = min(q1 - n * nco, nco)
        c = q - n * nco
        while c < c_end:
            cb = min(c_end - c, max(1, cap // (kk * min(positions, 256))))
            pc = min(positions, cap // (kk * cb))
            d[n, c:c + cb] = _ZERO
            for p0 in range(0, positions, pc):
                m = min(pc, positions - p0)
                if panels.size:
                    own_gemm.gemm(mine.ctypes.data, m, b[n].ctypes.data + p0 * 4, ldx, m,
                                  a_t[c * kk:(c + cb) * kk], panels, p0 > 0)
                else:
                    sgemm(fn, work, False, True, m, cb * kk, nci, b[n].ctypes.data + p0 * 4, ldx,
                          a.ctypes.data + c * kk * 4, nco * kk, mine.ctypes.data, m)
                _scatter(d, mine, n, c, cb, p0, m, w, kh, kw, stride)
            c += cb
        q = n * nco + c_end


# -- choice, scratch and binding ----------------------------------------------------------------------------
def _reads_in_place(node) -> bool:
    """sgemm can read each image of the input as (Cin, H * W) F32 with unit-stride positions."""
    b = node.src[1]
    w, h = b.ne[0], b.ne[1]
    return b.type.size == 4 and b.nb[0] == 4 and (h == 1 or b.nb[1] == 4 * w) and \
        (b.ne[2] == 1 or (b.nb[2] % 4 == 0 and b.nb[2] >= 4 * w * h))


def _workers(node, n_threads: int) -> int:
    a, b = node.src
    flops = 2 * b.nelements * a.ne[0] * a.ne[1] * a.ne[2]
    return max(1, min(n_threads, b.ne[3] * a.ne[2], flops // (1 << 18)))


def _cap(node, budget: int, n_threads: int) -> int:
    """Floats of `cols` per worker: all its channels' patches for every position, at most COLS_PER_WORKER and
    what fits the budget, but at least one channel's patches of one position."""
    a, b = node.src
    kk = a.ne[0] * a.ne[1]
    nth = _workers(node, n_threads)
    channels = -(-a.ne[2] * b.ne[3] // nth)
    whole = min(channels, a.ne[2]) * kk * b.ne[0] * b.ne[1]
    return max(kk, min(whole, COLS_PER_WORKER, budget // (4 * nth)))


def _widen_bytes(node) -> int:
    a, b = node.src
    return (aligned(a.nelements * 4) if a.type.size != 4 else 0) + \
        (0 if _reads_in_place(node) else aligned(b.nelements * 4))


def _own_gemm_parts(node, backend, wide: int):
    """(a^T bytes, one worker's panel bytes) when the product runs on the own GEMM, else (0, 0): the host
    lacks its vector width, or a^T and the workers' panels would take more than half the budget left."""
    a, b = node.src
    kk_out = a.ne[0] * a.ne[1] * a.ne[2]
    transposed = aligned(kk_out * a.ne[3] * 4)
    per_worker = own_gemm.panel_bytes(own_gemm.scratch_floats(b.ne[0] * b.ne[1], kk_out, a.ne[3]),
                                      backend.n_threads, backend.scratch_budget - wide - 2 * transposed)
    return (transposed, per_worker) if per_worker else (0, 0)


def temp_size(node, impl, backend) -> int:
    """gemm: widened operands, a^T and the workers' panels (own GEMM), and the workers' cols blocks (capped
    by scratch_budget); direct: none."""
    if impl == "direct":
        return 0
    wide = _widen_bytes(node)
    transposed, per_worker = _own_gemm_parts(node, backend, wide)
    own = transposed + backend.n_threads * per_worker
    return wide + own + _workers(node, backend.n_threads) * 4 * _cap(node, backend.scratch_budget - wide - own,
                                                                      backend.n_threads)


def choose(node, backend) -> str:
    return "gemm" if node.src[0].ne[3] >= GEMM_MIN_CIN else "direct"


def name(node, impl) -> str:
    return f"conv_transpose_2d_{impl}"


@register("conv_transpose_2d", temp_size=temp_size, name=name, blas=True, impls=("gemm", "direct"),
          choose=choose)
def bind_conv_transpose_2d(b: BoundNode):
    node = b.node
    d, a, x = b.dst, b.srcs[0], b.srcs[1]
    if d.size == 0:
        return None
    stride = node.op_params["stride"]
    if b.impl == "direct":
        return launch(direct_rows, (d, a, x, stride), b.threads_for(d.size * x.shape[1]))
    prepare, offset = [], 0
    if a.dtype != np.float32:
        a, step, offset = widen(b, a, offset)
        prepare.append(step)
    if _reads_in_place(node):
        ldx = x.strides[1] // 4 if x.shape[1] > 1 else x.shape[2] * x.shape[3]
    else:
        x, step, offset = widen(b, x, offset)
        prepare.append(step)
        ldx = x.shape[2] * x.shape[3]
    nth = _workers(node, b.n_threads)
    transposed, per_worker = _own_gemm_parts(node, b.backend, _widen_bytes(node))
    a_t = np.empty((0, a.shape[0]), np.float32)
    if transposed:
        rows = a.shape[1] * a.shape[2] * a.shape[3]
        a_t = b.temp[offset:offset + rows * a.shape[0] * 4].view(np.float32).reshape(rows, a.shape[0])
        pair = (a_t.reshape(1, 1, rows, a.shape[0]), a.reshape(1, 1, a.shape[0], rows).transpose(0, 1, 3, 2))
        prepare.append(launch(copy_transposed, pair, b.threads_for(a.size)))
        offset += transposed
    scratch, offset = worker_panels(b, offset, per_worker, nth)
    cap = (b.temp.size - offset) // (4 * nth)               # the planned _cap
    cols = b.temp[offset:offset + nth * cap * 4].view(np.float32)
    return then(prepare, launch(gemm_rows, (SGEMM_ADDRESS, d, a, a_t, x, ldx, cols, cap, stride, scratch), nth))
