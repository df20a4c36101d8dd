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
Each worker's V, M and four padded input rows live in its part of the temp block, sized by the budget.
"""
import numpy as np
from numba import prange

from ..registry import BoundNode
from .blas import SGEMM_ADDRESS, sgemm
from .common import block, kernel, launch, parallel_kernel, scalar
from .fp16 import load

WINOGRAD_CHUNK = 96
"""Most tiles a worker transforms and multiplies at a time (V and M of a chunk stay in its L2 cache)."""


def fits(node) -> bool:
    """A conv_2d with a 3x3 kernel, stride 1 and dilation 1."""
    a, p = node.src[0], node.op_params
    return (node.op == "conv_2d" and a.ne[0] == 3 and a.ne[1] == 3
            and (p["s0"], p["s1"], p["d0"], p["d1"]) == (1, 1, 1, 1))


def _tiles(node):
    """(tiles per image along H, along W) of a conv_2d node."""
    return (node.ne[1] + 1) // 2, (node.ne[0] + 1) // 2


def _worker_floats(chunk: int, ic: int, oc: int) -> int:
    """Floats of one worker's scratch for `chunk` tiles: V, M and 8 rows of 2 chunk + 2 values."""
    return 16 * (ic + oc) * chunk + 16 * chunk + 16


def _chunk_for(floats: int, ic: int, oc: int) -> int:
    """The most tiles (<= WINOGRAD_CHUNK) whose scratch fits in `floats` (0: not even one)."""
    return max(0, min(WINOGRAD_CHUNK, (floats - 16) // (16 * (ic + oc) + 16)))


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


def weights_bytes(node) -> int:
    a = node.src[0]
    return _aligned(16 * a.ne[2] * a.ne[3] * 4)


def temp_size(node, budget: int, n_threads: int) -> int:
    """U, then n_threads workers' scratch of up to WINOGRAD_CHUNK tiles (no more tiles than a worker has),
    capped by what `budget` leaves after U but never less than one worker's scratch for one tile."""
    th, tw = _tiles(node)
    ic, oc = node.src[0].ne[2], node.src[0].ne[3]
    tiles = node.ne[3] * th * tw
    chunk = min(WINOGRAD_CHUNK, -(-tiles // n_threads))
    u = weights_bytes(node)
    work = min(n_threads * _worker_floats(chunk, ic, oc) * 4, budget - u)
    return u + max(work, _worker_floats(1, ic, oc) * 4)


@scalar
def g_gt(g0, g1, g2):
    """(g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2): one row or column of G g G^T."""
    h = np.float32(0.5) * (g0 + g2)
    hb = np.float32(0.5) * g1
    return g0, h + hb, h - hb, g2


@kernel
def weights_rows(u, a, ith, nth):
    """u (16, OC, IC) float32 = G g G^T for each kernel g = a[oc, ic] (OC, IC, 3, 3); oc split over workers."""
    ic_n = a.shape[1]
    o0, o1 = block(a.shape[0], ith, nth)
    for oc in range(o0, o1):
        k = a[oc]
        for ic in range(ic_n):
            r00, r10, r20, r30 = g_gt(load(k[ic, 0, 0]), load(k[ic, 1, 0]), load(k[ic, 2, 0]))
            r01, r11, r21, r31 = g_gt(load(k[ic, 0, 1]), load(k[ic, 1, 1]), load(k[ic, 2, 1]))
            r02, r12, r22, r32 = g_gt(load(k[ic, 0, 2]), load(k[ic, 1, 2]), load(k[ic, 2, 2]))
            u[0, oc, ic], u[1, oc, ic], u[2, oc, ic], u[3, oc, ic] = g_gt(r00, r01, r02)
            u[4, oc, ic], u[5, oc, ic], u[6, oc, ic], u[7, oc, ic] = g_gt(r10, r11, r12)
            u[8, oc, ic], u[9, oc, ic], u[10, oc, ic], u[11, oc, ic] = g_gt(r20, r21, r22)
            u[12, oc, ic], u[13, oc, ic], u[14, oc, ic], u[15, oc, ic] = g_gt(r30, r31, r32)


@parallel_kernel
def weights_par(u, a, nth):
    for ith in prange(nth):
        weights_rows(u, a, ith, nth)


@scalar
def split_row(even, odd, src, x_lo, iw_n):
    """even[q] = src[x_lo + 2 q], odd[q] = src[x_lo + 2 q + 1] for q < len(even), 0 outside [0, iw_n)."""
    w = len(even)
    lo = min(w, max(0, (1 - x_lo) // 2))            # first q with both columns inside
    hi = max(lo, min(w, (iw_n - x_lo - 1) // 2))      # past the last such q
    for q in range(lo, hi):
        even[q] = load(src[x_lo + 2 * q])
        odd[q] = load(src[x_lo + 2 * q + 1])
    for q in range(lo):
        x = x_lo + 2 * q
        even[q] = load(src[x]) if x >= 0 else 0.0
        odd[q] = load(src[x + 1]) if x + 1 >= 0 else 0.0
    for q in range(hi, w):
        x = x_lo + 2 * q
        even[q] = load(src[x]) if 0 <= x < iw_n else 0.0
        odd[q] = load(src[x + 1]) if 0 <= x + 1 < iw_n else 0.0


@scalar
def input_tiles(v, rows, b, n, t0, m, tw, p0, p1):
    """v[xi, ic, j] = (B^T x B)[xi] of the 4x4 window of tile t0 + j (j < m) of image n, channel ic; tiles
    handled by runs along a tile row, through `rows` (>= 8 (m + 1) floats: the even and odd columns of 4
    zero-padded input rows). Each loop writes one row of v, so that it vectorises."""
    ic_n, ih_n = b.shape[1], b.shape[2]
    for ic in range(ic_n):
        j = 0
        t = t0
        while j < m:
            ty = t // tw
            tx0 = t - ty * tw
            cnt = min(m - j, tw - tx0)
            w = cnt + 1
            for r in range(4):
                even, odd = rows[2 * r * w:(2 * r + 1) * w], rows[(2 * r + 1) * w:(2 * r + 2) * w]
                iy = 2 * ty + r - p1
                if iy < 0 or iy >= ih_n:
                    even[:] = 0.0
                    odd[:] = 0.0
                else:
                    split_row(even, odd, b[n, ic, iy], 2 * tx0 - p0, b.shape[3])
            for k in range(4):      # row k of B^T x combines rows (ra, rb): d0 - d2, d1 + d2, d2 - d1, d1 - d3
                ra, rb, sg = (0, 2, -1.0) if k == 0 else (1, 2, 1.0) if k == 1 else (2, 1, -1.0) if k == 2 \
                    else (1, 3, -1.0)
                ea, oa = rows[2 * ra * w:(2 * ra + 1) * w], rows[(2 * ra + 1) * w:(2 * ra + 2) * w]
                eb, ob = rows[2 * rb * w:(2 * rb + 1) * w], rows[(2 * rb + 1) * w:(2 * rb + 2) * w]
                sgn = np.float32(sg)
                v0, v1 = v[4 * k, ic, j:j + cnt], v[4 * k + 1, ic, j:j + cnt]
                v2, v3 = v[4 * k + 2, ic, j:j + cnt], v[4 * k + 3, ic, j:j + cnt]
                for q in range(cnt):    # columns (c0, c1, c2, c3) = (e[q], o[q], e[q + 1], o[q + 1])
                    v0[q] = (ea[q] + sgn * eb[q]) - (ea[q + 1] + sgn * eb[q + 1])
                for q in range(cnt):
                    v1[q] = (oa[q] + sgn * ob[q]) + (ea[q + 1] + sgn * eb[q + 1])
                for q in range(cnt):
                    v2[q] = (ea[q + 1] + sgn * eb[q + 1]) - (oa[q] + sgn * ob[q])
                for q in range(cnt):
                    v3[q] = (oa[q] + sgn * ob[q]) - (oa[q + 1] + sgn * ob[q + 1])
            j += cnt
            t += cnt


@scalar
def output_tiles(d, mm, n, t0, m, tw):
    """d[n, oc, 2 ty + r, 2 tx + c] = (A^T M A)[r, c] of tile t0 + j (j < m), M[xi] = mm[xi, oc, j]; rows and
    columns past the output's edge are not written."""
    oc_n, oh_n, ow_n = d.shape[1], d.shape[2], d.shape[3]
    for oc in range(oc_n):
        j = 0
        t = t0
        while j < m:
            ty = t // tw
            tx0 = t - ty * tw
            cnt = min(m - j, tw - tx0)
            y0 = d[n, oc, 2 * ty]
            y1 = d[n, oc, min(2 * ty + 1, oh_n - 1)]
            full = min(cnt, ow_n // 2 - tx0)      # tiles with both output columns inside
            for q in range(cnt):
                i = j + q
                t00 = mm[0, oc, i] + mm[4, oc, i] + mm[8, oc, i]
                t01 = mm[1, oc, i] + mm[5, oc, i] + mm[9, oc, i]
                t02 = mm[2, oc, i] + mm[6, oc, i] + mm[10, oc, i]
                t03 = mm[3, oc, i] + mm[7, oc, i] + mm[11, oc, i]
                t10 = mm[4, oc, i] - mm[8, oc, i] - mm[12, oc, i]
                t11 = mm[5, oc, i] - mm[9, oc, i] - mm[13, oc, i]
                t12 = mm[6, oc, i] - mm[10, oc, i] - mm[14, oc, i]
                t13 = mm[7, oc, i] - mm[11, oc, i] - mm[15, oc, i]
                x = 2 * (tx0 + q)
                if q < full:
                    y0[x], y0[x + 1] = t00 + t01 + t02, t01 - t02 - t03
                    y1[x], y1[x + 1] = t10 + t11 + t12, t11 - t12 - t13
                else:
                    y0[x] = t00 + t01 + t02
                    y1[x] = t10 + t11 + t12
            if 2 * ty + 1 >= oh_n:     # the bottom tile row hangs over: rewrite the last row with row 0
                for q in range(cnt):
                    i = j + q
                    x = 2 * (tx0 + q)
                    t00 = mm[0, oc, i] + mm[4, oc, i] + mm[8, oc, i]
                    t01 = mm[1, oc, i] + mm[5, oc, i] + mm[9, oc, i]
                    t02 = mm[2, oc, i] + mm[6, oc, i] + mm[10, oc, i]
                    t03 = mm[3, oc, i] + mm[7, oc, i] + mm[11, oc, i]
                    y0[x] = t00 + t01 + t02
                    if q < full:
                        y0[x + 1] = t01 - t02 - t03
            j += cnt
            t += cnt


@kernel
def winograd_rows(fn, d, u, b, scratch, chunk, tw, p0, p1, ith, nth):
    """Worker ith's tiles (of all N * TH * TW), `chunk` at a time within one image: transform the inputs into
    its part of `scratch`, multiply by U (16 sgemm), transform into d."""
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
        m = min(q1 - q, chunk, per_image - t0)
        v = mine[:16 * ic_n * m].reshape((16, ic_n, m))
        mm = mine[16 * ic_n * m:16 * (ic_n + oc_n) * m].reshape((16, oc_n, m))
        rows = mine[16 * (ic_n + oc_n) * m:]
        input_tiles(v, rows, b, n, t0, m, tw, p0, p1)
        for xi in range(16):
            sgemm(fn, work, False, False, m, oc_n, ic_n, v[xi].ctypes.data, m, u[xi].ctypes.data, ic_n,
                  mm[xi].ctypes.data, m)
        output_tiles(d, mm, n, t0, m, tw)
        q += m


@parallel_kernel
def winograd_par(fn, d, u, b, scratch, chunk, tw, p0, p1, nth):
    for ith in prange(nth):
        winograd_rows(fn, d, u, b, scratch, chunk, tw, p0, p1, ith, nth)


def bind(b: BoundNode, d, a, x, nth: int):
    """The zero-argument call running the node of `b` (arrays d, a, x as in conv.py) on up to nth workers."""
    node = b.node
    oc_n, ic_n = a.shape[0], a.shape[1]
    u_bytes = weights_bytes(node)
    u = b.temp[:16 * oc_n * ic_n * 4].view(np.float32).reshape((16, oc_n, ic_n))
    scratch = b.temp[u_bytes:].view(np.float32)
    nth = max(1, min(nth, scratch.size // _worker_floats(1, ic_n, oc_n)))
    chunk = _chunk_for(scratch.size // nth, ic_n, oc_n)
    th, tw = _tiles(node)
    nth = max(1, min(nth, d.shape[0] * th * tw))
    prepare = launch(weights_rows, weights_par, (u, a), b.threads_for(u.size, 1 << 12))
    run = launch(winograd_rows, winograd_par, (SGEMM_ADDRESS, d, u, x, scratch, chunk, tw, node.op_params["p0"],
                                               node.op_params["p1"]), nth)

    def run_all():
        prepare()
        run()
    return run_all
