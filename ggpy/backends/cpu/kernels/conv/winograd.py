"""conv_2d as Winograd F(2x2, 3x3) on the CPU: 3x3 kernels, stride 1, dilation 1, any padding.

Arrays in reversed ne order as in conv.py: kernel a (OC, IC, 3, 3), input b (N, IC, IH, IW) with any strides
and element type, output d (N, OC, OH, OW). The output is cut into 2x2 tiles, tile (ty, tx) of image n read
from the 4x4 input window at (2 ty - p1, 2 tx - p0). With B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]],
G = [[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]], A^T = [[1,1,1,0],[0,1,-1,-1]]:

1. weights  U[xi, oc, ic] = (G g G^T)[xi] (16, OC, IC), into the temp block, once per evaluation;
2. per worker, a chunk of at most `chunk` tiles of one image at a time:
   input    V[xi, ic, j] = (B^T x B)[xi] of tile j (16, IC, chunk),
   product  M[xi] (OC, chunk) = U[xi] (OC, IC) @ V[xi] (IC, chunk), 16 single-threaded sgemm,
   output   d[n, oc, 2 ty + r, 2 tx + c] = (A^T M A)[r, c].
16 products of IC x OC per 4 outputs instead of 9 per output: 2.25x fewer multiply-adds than im2col + GEMM.
Each worker's V, M and 8 rows of transform scratch live in its part of the temp block, sized by the budget.
"""
import numpy as np

from ...registry import BoundNode
from ..blas import SGEMM_ADDRESS, sgemm
from ..common import block, kernel, launch, scalar
from ..fp16 import load

CHUNK_BYTES = 768 << 10
CHUNK_MIN, CHUNK_MAX = 32, 128
"""A worker transforms and multiplies whole tile rows (or equal parts of one) at a time, as many tiles as
keep its V and M within CHUNK_BYTES (its L2 cache), between CHUNK_MIN (sgemm slows below) and CHUNK_MAX.
Measured at 2 threads on 64x64: 32 tiles (one row) 10-20% faster than 96 for 160 channels, while chunks
that cut rows unevenly (40) were slowest."""
MIN_CHANNELS = 16
MIN_TILES = 64
"""choose() picks winograd from MIN_CHANNELS input and output channels and MIN_TILES output tiles (below,
sgemm's products are too small for the saved multiplications to pay for the transforms)."""


def fits(node) -> bool:
    """A conv_2d with a 3x3 kernel, stride 1 and dilation 1."""
    a, p = node.src[0], node.op_params
    return (node.op == "conv_2d" and a.ne[0] == 3 and a.ne[1] == 3
            and (p["s0"], p["s1"], p["d0"], p["d1"]) == (1, 1, 1, 1))


def worth_it(node) -> bool:
    """Whether winograd should beat im2col on `node` (measured on 3x3 convolutions of 16-256 channels)."""
    th, tw = _tiles(node)
    a = node.src[0]
    return fits(node) and min(a.ne[2], a.ne[3]) >= MIN_CHANNELS and node.ne[3] * th * tw >= MIN_TILES


def _tiles(node):
    """(tiles per image along H, along W) of a conv_2d node."""
    return (node.ne[1] + 1) // 2, (node.ne[0] + 1) // 2


def _worker_floats(chunk: int, ic: int, oc: int) -> int:
    """Floats of one worker's scratch for `chunk` tiles: V, M and 8 rows of 2 chunk + 2 values."""
    return 16 * (ic + oc) * chunk + 16 * chunk + 16


def chunk_tiles(tw: int, ic: int, oc: int) -> int:
    """Tiles per chunk for tile rows of tw tiles: whole rows, or a row cut in equal parts (see CHUNK_BYTES)."""
    target = max(CHUNK_MIN, min(CHUNK_MAX, CHUNK_BYTES // (64 * (ic + oc))))
    if tw <= target:
        return target // tw * tw
    return -(-tw // -(-tw // target))


def _fitting(floats: int, ic: int, oc: int) -> int:
    """The most tiles whose worker scratch fits in `floats` (0: not even one)."""
    return max(0, (floats - 16) // (16 * (ic + oc) + 16))


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


def weights_bytes(node) -> int:
    """Bytes of U (16 x IC x OC floats), 64-byte aligned."""
    a = node.src[0]
    return _aligned(16 * a.ne[2] * a.ne[3] * 4)


def temp_size(node, budget: int, n_threads: int) -> int:
    """U, then n_threads workers' scratch of a chunk of tiles (no more tiles than a worker has), capped by what
    `budget` leaves after U but never less than one worker's scratch for one tile."""
    th, tw = _tiles(node)
    ic, oc = node.src[0].ne[2], node.src[0].ne[3]
    chunk = min(chunk_tiles(tw, ic, oc), -(-node.ne[3] * th * tw // n_threads))
    u = weights_bytes(node)
    work = min(n_threads * _worker_floats(chunk, ic, oc) * 4, budget - u)
    return u + max(work, _worker_floats(1, ic, oc) * 4)


@kernel
def weights_rows(u, a, ith, nth):
    """u (16, OC, IC) float32 = G g G^T for each kernel g = a[oc, ic] (OC, IC, 3, 3); oc split over workers.
    Each loop runs over ic and writes one row: first G g (4 x 3 rows of IC values), then (G g) G^T."""
    ic_n = a.shape[1]
    gg = np.empty((12, ic_n), np.float32)
    half = np.float32(0.5)
    o0, o1 = block(a.shape[0], ith, nth)
    for oc in range(o0, o1):
        k = a[oc]
        for c in range(3):      # rows of G g: g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2 (column c)
            r0, r1, r2, r3 = gg[c], gg[3 + c], gg[6 + c], gg[9 + c]
            for i in range(ic_n):
                r0[i] = load(k[i, 0, c])
            for i in range(ic_n):
                r3[i] = load(k[i, 2, c])
            for i in range(ic_n):
                r1[i] = half * (r0[i] + load(k[i, 1, c]) + r3[i])
            for i in range(ic_n):
                r2[i] = half * (r0[i] - load(k[i, 1, c]) + r3[i])
        for r in range(4):      # the same combinations of each row's columns
            c0, c1, c2 = gg[3 * r], gg[3 * r + 1], gg[3 * r + 2]
            u0, u1, u2, u3 = u[4 * r, oc], u[4 * r + 1, oc], u[4 * r + 2, oc], u[4 * r + 3, oc]
            for i in range(ic_n):
                u0[i] = c0[i]
            for i in range(ic_n):
                u1[i] = half * (c0[i] + c1[i] + c2[i])
            for i in range(ic_n):
                u2[i] = half * (c0[i] - c1[i] + c2[i])
            for i in range(ic_n):
                u3[i] = c2[i]


@scalar
def input_tiles(v, rows, b, n, t0, m, tw, p0, p1):
    """v[xi, ic, j] = (B^T x B)[xi] of the 4x4 window of tile t0 + j (j < m) of image n, channel ic; tiles
    handled by runs along a tile row, through `rows` (>= 8 (2 m + 2) floats: 4 zero-padded input rows, then
    the rows of B^T x). Each loop writes one array, so that it vectorises."""
    ic_n, ih_n, iw_n = b.shape[1], b.shape[2], b.shape[3]
    for ic in range(ic_n):
        j = 0
        t = t0
        while j < m:
            ty = t // tw
            tx0 = t - ty * tw
            cnt = min(m - j, tw - tx0)
            width = 2 * cnt + 2
            x_lo = 2 * tx0 - p0
            a0 = min(max(0, -x_lo), width)
            a1 = max(a0, min(width, iw_n - x_lo))
            for r in range(4):
                row = rows[r * width:(r + 1) * width]
                iy = 2 * ty + r - p1
                if iy < 0 or iy >= ih_n:
                    row[:] = 0.0
                    continue
                row[:a0] = 0.0
                row[a1:] = 0.0
                src = b[n, ic, iy, x_lo + a0:x_lo + a1]
                dst = row[a0:a1]
                for x in range(a1 - a0):
                    dst[x] = load(src[x])
            for k in range(4):      # row k of B^T x: x0 - x2, x1 + x2, x2 - x1, x1 - x3 of rows (xa, xb)
                ra, rb, sg = (0, 2, -1.0) if k == 0 else (1, 2, 1.0) if k == 1 else (2, 1, -1.0) if k == 2 \
                    else (1, 3, -1.0)
                xa, xb = rows[ra * width:(ra + 1) * width], rows[rb * width:(rb + 1) * width]
                sk = rows[(4 + k) * width:(5 + k) * width]
                sgn = np.float32(sg)
                for x in range(width):
                    sk[x] = xa[x] + sgn * xb[x]
            for k in range(4):      # (B^T x) B: the same combinations of each tile's columns 2 q .. 2 q + 3
                sk = rows[(4 + k) * width:(5 + k) * width]
                v0, v1 = v[4 * k, ic, j:j + cnt], v[4 * k + 1, ic, j:j + cnt]
                v2, v3 = v[4 * k + 2, ic, j:j + cnt], v[4 * k + 3, ic, j:j + cnt]
                for q in range(cnt):
                    v0[q] = sk[2 * q] - sk[2 * q + 2]
                for q in range(cnt):
                    v1[q] = sk[2 * q + 1] + sk[2 * q + 2]
                for q in range(cnt):
                    v2[q] = sk[2 * q + 2] - sk[2 * q + 1]
                for q in range(cnt):
                    v3[q] = sk[2 * q + 1] - sk[2 * q + 3]
            j += cnt
            t += cnt


@scalar
def output_tiles(d, mm, rows, n, t0, m, tw):
    """d[n, oc, 2 ty + r, 2 tx + c] = (A^T M A)[r, c] of tile t0 + j (j < m), M[xi] = mm[xi, oc, j]; rows and
    columns past the output's edge are not written. `rows` (>= 8 m floats) holds the rows of A^T M; each loop
    writes one array, so that it vectorises."""
    oc_n, oh_n, ow_n = d.shape[1], d.shape[2], d.shape[3]
    for oc in range(oc_n):
        j = 0
        t = t0
        while j < m:
            ty = t // tw
            tx0 = t - ty * tw
            cnt = min(m - j, tw - tx0)
            for c in range(4):        # A^T M: rows m0 + m1 + m2 and m1 - m2 - m3, column c
                m0, m1 = mm[c, oc, j:j + cnt], mm[4 + c, oc, j:j + cnt]
                m2, m3 = mm[8 + c, oc, j:j + cnt], mm[12 + c, oc, j:j + cnt]
                r0, r1 = rows[c * cnt:(c + 1) * cnt], rows[(4 + c) * cnt:(5 + c) * cnt]
                for q in range(cnt):
                    r0[q] = m0[q] + m1[q] + m2[q]
                for q in range(cnt):
                    r1[q] = m1[q] - m2[q] - m3[q]
            full = max(0, min(cnt, ow_n // 2 - tx0))      # tiles with both output columns inside
            for r in range(min(2, oh_n - 2 * ty)):        # (A^T M) A: columns c0 + c1 + c2 and c1 - c2 - c3
                c0, c1 = rows[4 * r * cnt:(4 * r + 1) * cnt], rows[(4 * r + 1) * cnt:(4 * r + 2) * cnt]
                c2, c3 = rows[(4 * r + 2) * cnt:(4 * r + 3) * cnt], rows[(4 * r + 3) * cnt:(4 * r + 4) * cnt]
                y = d[n, oc, 2 * ty + r, 2 * tx0:]
                for q in range(full):
                    y[2 * q] = c0[q] + c1[q] + c2[q]
                    y[2 * q + 1] = c1[q] - c2[q] - c3[q]
                if full < cnt:
                    y[2 * full] = c0[full] + c1[full] + c2[full]
            j += cnt
            t += cnt


@kernel
def winograd_rows(fn, d, u, b, scratch, chunk, tw, p0, p1, ith, nth):
    """Worker ith's tiles (of all N * TH * TW) by chunks: the tiles of [c * chunk, (c + 1) * chunk) of one image
    it owns (so that chunks of whole rows stay aligned to rows); transform the inputs into its part of
    `scratch`, multiply by U (16 sgemm), transform into d."""
    n_n, oc_n = d.shape[0], d.shape[1]
    ic_n = b.shape[1]
    per_image = ((d.shape[2] + 1) // 2) * tw
    size = 16 * (ic_n + oc_n) * chunk + 16 * chunk + 16
    mine = scratch[ith * size:(ith + 1) * size]
    work = np.empty(10, np.int32)
    q0, q1 = block(n_n * per_image, ith, nth)
    q = q0
    while q < q1:
        n = q // per_image
        t0 = q - n * per_image
        m = min(q1 - q, chunk - t0 % chunk, per_image - t0)
        v = mine[:16 * ic_n * m].reshape((16, ic_n, m))
        mm = mine[16 * ic_n * m:16 * (ic_n + oc_n) * m].reshape((16, oc_n, m))
        rows = mine[16 * (ic_n + oc_n) * m:]
        input_tiles(v, rows, b, n, t0, m, tw, p0, p1)
        for xi in range(16):
            sgemm(fn, work, False, False, m, oc_n, ic_n, v[xi].ctypes.data, m, u[xi].ctypes.data, ic_n,
                  mm[xi].ctypes.data, m)
        output_tiles(d, mm, rows, n, t0, m, tw)
        q += m


def bind(b: BoundNode, d, a, x, nth: int):
    """The zero-argument call running the node of `b` (arrays d, a, x as in conv.py) on up to nth workers."""
    node = b.node
    oc_n, ic_n = a.shape[0], a.shape[1]
    u_bytes = weights_bytes(node)
    u = b.temp[:16 * oc_n * ic_n * 4].view(np.float32).reshape((16, oc_n, ic_n))
    scratch = b.temp[u_bytes:].view(np.float32)
    nth = max(1, min(nth, scratch.size // _worker_floats(1, ic_n, oc_n)))
    th, tw = _tiles(node)
    chunk = min(chunk_tiles(tw, ic_n, oc_n), _fitting(scratch.size // nth, ic_n, oc_n))
    nth = max(1, min(nth, d.shape[0] * th * tw))
    prepare = launch(weights_rows, (u, a), b.threads_for(u.size, 1 << 12))
    run = launch(winograd_rows, (SGEMM_ADDRESS, d, u, x, scratch, chunk, tw, node.op_params["p0"],
                                 node.op_params["p1"]), nth)

    def run_all():
        prepare()
        run()
    return run_all
