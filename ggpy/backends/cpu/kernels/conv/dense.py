"""im2col, conv_1d and conv_2d on the CPU.

Arrays arrive in reversed ne order: kernel a (OC, IC, KH, KW), input b (N, IC, IH, IW) with any strides,
output d (N, OC, OH, OW). conv_1d runs as conv_2d with KH = IH = 1. conv_2d has four implementations,
chosen per node (or forced with CPUBackend(force={"conv_2d": impl})):

im2col    each worker unfolds a chunk (at most IM2COL_CHUNK) of its output positions into its share of the
          temp block (IC * KH * KW rows of positions, filled by runs of output rows) and multiplies it with
          the kernel by single-threaded BLAS sgemm (no transposed operand). The temp block holds what the
          workers unfold at once (n_threads chunks), capped by backend.scratch_budget (at least one
          position), so scratch stays small however large the image.
gemm_1x1  1x1 kernel, stride 1, no padding: the input is read in place as (H * W, IC) per image, by ggpy's
          own GEMM (gemm.py: packed panels in the temp block) when positions are unit stride and the host
          has AVX-512 or AVX2, else by BLAS sgemm.
winograd  3x3 kernel, stride 1, dilation 1: Winograd F(2x2, 3x3), see winograd.py.
direct    sliding-window sums, no scratch: chosen only when a patch has at most DIRECT_MAX_PATCH values
          (IC * KH * KW), too few for a GEMM; measured 3-4x slower than im2col on a 3x3 RGB stem.
An F16 kernel (or an input BLAS cannot read) is first widened to contiguous F32 in the temp block.
The im2col op writes each position's patch in order, compiled per kernel size (KH, KW as literals, so the
runs of KW values unroll).
"""
import numpy as np

from .....errors import UnsupportedOpError
from ...registry import BoundNode, register
from . import winograd
from .. import gemm as own_gemm
from ..blas import SGEMM_ADDRESS, sgemm
from ..common import block, kernel, launch, row_index, scalar
from ..fp16 import load, store
from ..convert import to_f32_rows

DIRECT_MAX_PATCH = 4
IM2COL_CHUNK = 512
"""Most output positions an im2col worker unfolds and multiplies at a time: sgemm measured 10-40% faster
with ~256-1024 positions per call than with thousands (the unfolded block stays in cache)."""


@scalar
def fill_cols(out, m, b, n, pos, ow_n, kh_n, kw_n, s0, s1, p0, p1, d0, d1):
    """out[kk * m + j] = patch value kk = (ic * KH + kh) * KW + kw of output position pos + j of image n:
    one row of m positions per patch value, filled by whole runs of output rows (contiguous for stride 1)."""
    ic_n, ih_n, iw_n = b.shape[1], b.shape[2], b.shape[3]
    for ic in range(ic_n):
        for kh in range(kh_n):
            for kw in range(kw_n):
                kk = (ic * kh_n + kh) * kw_n + kw
                row = out[kk * m:(kk + 1) * m]
                off = kw * d0 - p0
                lo = min(ow_n, max(0, (s0 - 1 - off) // s0))
                hi = max(lo, min(ow_n, (iw_n - 1 - off) // s0 + 1))
                j = 0
                p = pos
                while j < m:
                    oh = p // ow_n
                    ow0 = p - oh * ow_n
                    cnt = min(m - j, ow_n - ow0)
                    iy = oh * s1 + kh * d1 - p1
                    seg = row[j:j + cnt]
                    if iy < 0 or iy >= ih_n:
                        seg[:] = 0.0
                    else:
                        src = b[n, ic, iy]
                        a0 = min(max(lo, ow0), ow0 + cnt)
                        a1 = max(a0, min(hi, ow0 + cnt))
                        seg[:a0 - ow0] = 0.0
                        seg[a1 - ow0:] = 0.0
                        dst = seg[a0 - ow0:a1 - ow0]
                        base = a0 * s0 + off
                        if s0 == 1:
                            sv = src[base:base + (a1 - a0)]
                            for t in range(a1 - a0):
                                dst[t] = load(sv[t])
                        else:
                            for t in range(a1 - a0):
                                dst[t] = load(src[base + t * s0])
                    j += cnt
                    p += cnt


@scalar
def fill_patch(row, b, n, iy0, x0, kh_n, kw_n, d0, d1, inside):
    """row[(ic * KH + kh) * KW + kw] = b[n, ic, iy0 + kh * d1, x0 + kw * d0] (0 outside the input); `inside`:
    every column x0 + kw * d0 is inside, so that only rows need checking."""
    ic_n, ih_n, iw_n = b.shape[1], b.shape[2], b.shape[3]
    zero = store(np.float32(0.0), row.dtype)
    for ic in range(ic_n):
        plane = b[n, ic]
        for kh in range(kh_n):
            iy = iy0 + kh * d1
            out = row[(ic * kh_n + kh) * kw_n:(ic * kh_n + kh + 1) * kw_n]
            if iy < 0 or iy >= ih_n:
                for kw in range(kw_n):
                    out[kw] = zero
            elif inside:
                src = plane[iy]
                for kw in range(kw_n):
                    out[kw] = store(load(src[x0 + kw * d0]), row.dtype)
            else:
                src = plane[iy]
                for kw in range(kw_n):
                    x = x0 + kw * d0
                    out[kw] = store(load(src[x]), row.dtype) if 0 <= x < iw_n else zero


@kernel
def im2col_rows(d, b, kh_n, kw_n, s0, s1, p0, p1, d0, d1, ith, nth):
    """d (N, OH, OW, IC * KH * KW) = the patches of b (N, IC, IH, IW): worker ith's block of output rows
    (n, oh), each position's patch written in order (runs of KW values)."""
    n_n, oh_n, ow_n = d.shape[0], d.shape[1], d.shape[2]
    iw_n = b.shape[3]
    r0, r1 = block(n_n * oh_n, ith, nth)
    for r in range(r0, r1):
        n = r // oh_n
        oh = r - n * oh_n
        for ow in range(ow_n):
            x0 = ow * s0 - p0
            inside = x0 >= 0 and x0 + (kw_n - 1) * d0 < iw_n
            fill_patch(d[n, oh, ow], b, n, oh * s1 - p1, x0, kh_n, kw_n, d0, d1, inside)


@scalar
def _product(fn, work, scratch, w_packed, trans_x, m, x_ptr, ldx, w, c_ptr, ldc):
    """C (m x OC, column-major, ldc floats) = X (m x K) @ w^T, w (OC, K) contiguous: by ggpy's own GEMM when
    the worker has scratch for its panels (X column-major, ldx; w_packed: its last product had this w), else by
    BLAS sgemm (X read transposed when trans_x). Pointers are integer addresses."""
    if scratch.size:
        own_gemm.gemm(c_ptr, ldc, x_ptr, ldx, m, w, scratch, w_packed)
    else:
        sgemm(fn, work, trans_x, False, m, w.shape[0], w.shape[1], x_ptr, ldx, w.ctypes.data, w.shape[1],
              c_ptr, ldc)


@kernel
def conv_im2col_rows(fn, d, w, b, cols, chunk, scratch, kh_n, kw_n, s0, s1, p0, p1, d0, d1, ith, nth):
    """Worker ith's output positions, `chunk` at a time: unfold them into its part of `cols` (float32,
    chunk * K per worker) as K rows of positions, then d[n, :, positions] = cols^T @ w^T, w the kernel as
    (OC, K) contiguous F32, both operands read without transposing (_product; scratch[ith]: its panels)."""
    n_n, _, oh_n, ow_n = d.shape
    k = w.shape[1]
    plane = oh_n * ow_n
    mine = cols[ith * chunk * k:(ith + 1) * chunk * k]
    work = np.empty(10, np.int32)
    q0, q1 = block(n_n * plane, ith, nth)
    q = q0
    while q < q1:
        n = q // plane
        pos = q - n * plane
        m = min(q1 - q, chunk, plane - pos)
        fill_cols(mine, m, b, n, pos, ow_n, kh_n, kw_n, s0, s1, p0, p1, d0, d1)
        _product(fn, work, scratch[ith], q > q0, False, m, mine.ctypes.data, m, w, d[n].ctypes.data + pos * 4,
                 plane)
        q += m


@kernel
def conv_1x1_rows(fn, d, w, b, trans_x, ldx, step, scratch, ith, nth):
    """d[n] (OC, P) = w (OC, IC) @ x_n (IC, P), x_n = image n of b read in place: position p, channel c at
    byte p * step + c * ldx * 4 (trans_x False) or p * ldx * 4 + c * 4 (trans_x True); P = H * W.
    Worker ith takes an equal block of the N * P positions, one product per image it touches (_product)."""
    n_n, _, oh_n, ow_n = d.shape
    plane = oh_n * ow_n
    work = np.empty(10, np.int32)
    q0, q1 = block(n_n * plane, ith, nth)
    q = q0
    while q < q1:
        n = q // plane
        p0 = q - n * plane
        m = min(q1 - q, plane - p0)
        _product(fn, work, scratch[ith], q > q0, trans_x, m, b[n].ctypes.data + p0 * step, ldx, w,
                 d[n].ctypes.data + p0 * 4, plane)
        q += m


@kernel
def conv_direct_rows(d, a, b, s0, s1, p0, p1, d0, d1, ith, nth):
    """d[n, oc, oh, :] = sum over ic, kh, kw of a[oc, ic, kh, kw] * (shifted, strided row of b); output rows
    (n, oc, oh) split over workers."""
    n_n, oc_n, oh_n, ow_n = d.shape
    ic_n, kh_n, kw_n = a.shape[1], a.shape[2], a.shape[3]
    ih_n, iw_n = b.shape[2], b.shape[3]
    r0, r1 = block(n_n * oc_n * oh_n, ith, nth)
    for r in range(r0, r1):
        n, oc, oh = row_index(r, oc_n, oh_n)
        drow = d[n, oc, oh]
        drow[:] = 0.0
        for ic in range(ic_n):
            for kh in range(kh_n):
                iy = oh * s1 + kh * d1 - p1
                if iy < 0 or iy >= ih_n:
                    continue
                brow = b[n, ic, iy]
                for kw in range(kw_n):
                    w = load(a[oc, ic, kh, kw])
                    off = kw * d0 - p0
                    lo = max(0, (s0 - 1 - off) // s0)
                    hi = min(ow_n, (iw_n - 1 - off) // s0 + 1)
                    if hi <= lo:
                        continue
                    dv = drow[lo:hi]
                    start = lo * s0 + off
                    for j in range(hi - lo):
                        dv[j] += w * load(brow[start + j * s0])


# -- shapes as the kernels see them -------------------------------------------------------------------------
def _as_2d(node, arrays):
    """(d, a, b) as 4-d conv_2d arrays: conv_1d's (1, N, OC, OL), (1, OC, IC, K), (1, N, IC, L) get a unit
    height axis."""
    if node.op == "conv_2d":
        return arrays
    out = []
    for arr in arrays:
        _, x, y, z = arr.shape
        out.append(np.lib.stride_tricks.as_strided(arr, (x, y, 1, z), (arr.strides[1], arr.strides[2],
                                                                        arr.strides[3] * z, arr.strides[3])))
    return out


def _geometry(node):
    """(N, OC, OH, OW, IC, KH, KW) of a conv_1d/conv_2d node."""
    a = node.src[0]
    if node.op == "conv_2d":
        return node.ne[3], node.ne[2], node.ne[1], node.ne[0], a.ne[2], a.ne[1], a.ne[0]
    return node.ne[2], node.ne[1], 1, node.ne[0], a.ne[1], 1, a.ne[0]


def _params(node):
    p = node.op_params
    return p["s0"], p["s1"], p["p0"], p["p1"], p["d0"], p["d1"]


def aligned(n: int) -> int:
    """n rounded up to 64 bytes (where temp blocks start)."""
    return (n + 63) // 64 * 64


def _is_1x1(node) -> bool:
    _, _, _, _, _, kh, kw = _geometry(node)
    return kh == 1 and kw == 1 and _params(node) == (1, 1, 0, 0, 1, 1)


def _b_layout(node):
    """How sgemm reads image n of the input in place, as (trans_x, ldx, step bytes per position), or None:
    positions (h, w) must collapse to one stride, and positions or channels must be unit stride."""
    b = node.src[1]
    if b.type.size != 4:
        return None
    if node.op == "conv_2d":
        (w, h, c, _), (sw, sh, sc, _) = b.ne, b.nb
    else:
        (w, c, _, _), (sw, sc, _, _) = b.ne, b.nb
        h, sh = 1, sw * w
    if not (h == 1 or w == 1 or sh == w * sw):
        return None
    step = sw if w > 1 else sh
    plane = w * h
    if (plane == 1 or step == 4) and (c == 1 or sc >= 4 * plane) and sc % 4 == 0:
        return False, max(sc // 4, plane, 1), step
    if (c == 1 or sc == 4) and (plane == 1 or step >= 4 * c) and step % 4 == 0:
        return True, max(step // 4, c, 1), step
    return None


def _own_gemm_bytes(node, backend, m: int, budget: int) -> int:
    """One worker's own-GEMM panels for this conv's products (m positions at a time), or 0 for BLAS sgemm."""
    _, oc, _, _, ic, kh, kw = _geometry(node)
    return own_gemm.panel_bytes(own_gemm.scratch_floats(m, oc, ic * kh * kw), backend.n_threads, budget)


def _gemm_1x1_bytes(node, backend):
    """(widened kernel, input copy, one worker's own-GEMM panels) of gemm_1x1. The input is copied to
    contiguous F32 when sgemm cannot read it in place; own GEMM needs unit-stride positions (a
    channels-contiguous input goes to sgemm, which reads it transposed)."""
    wide = _kernel_f32_bytes(node)
    layout = _b_layout(node)
    copy = aligned(node.src[1].nelements * 4) if layout is None else 0
    unit_positions = layout is None or (not layout[0] and layout[2] == 4)
    _, _, oh, ow, _, _, _ = _geometry(node)
    panels = _own_gemm_bytes(node, backend, oh * ow, backend.scratch_budget - wide - copy) if unit_positions \
        else 0
    return wide, copy, panels


def _im2col_parts(node, backend):
    """(widened kernel, one worker's own-GEMM panels, im2col matrix) bytes of the im2col implementation."""
    wide = _kernel_f32_bytes(node)
    panels = _own_gemm_bytes(node, backend, IM2COL_CHUNK, backend.scratch_budget - wide)
    budget = backend.scratch_budget - wide - backend.n_threads * panels
    return wide, panels, _cols_bytes(node, budget, backend.n_threads)


def _im2col_bytes(node) -> int:
    n, _, oh, ow, ic, kh, kw = _geometry(node)
    return n * oh * ow * ic * kh * kw * 4


def _cols_bytes(node, budget: int, n_threads: int) -> int:
    """Bytes of the im2col matrix a node plans for: what its workers unfold at once (n_threads chunks of
    IM2COL_CHUNK positions), never more than the whole matrix, capped by `budget` (at least one position)."""
    _, _, _, _, ic, kh, kw = _geometry(node)
    k_bytes = ic * kh * kw * 4
    return min(_im2col_bytes(node), max(min(budget, n_threads * IM2COL_CHUNK * k_bytes), k_bytes))


def _kernel_f32_bytes(node) -> int:
    """Bytes of the kernel widened (F16) or made contiguous (a strided F32 view) in the temp block, else 0."""
    a = node.src[0]
    return aligned(a.nelements * 4) if a.type.size != 4 or not a.is_contiguous() else 0


def _check_impl(node, impl):
    needs = {"gemm_1x1": (_is_1x1, "a 1x1 kernel, stride 1, no padding and dilation 1"),
             "winograd": (winograd.fits, "conv_2d with a 3x3 kernel, stride 1 and dilation 1")}.get(impl)
    if needs is not None and not needs[0](node):
        raise UnsupportedOpError(f"cpu: {node.op} '{node.name}' (kernel ne={node.src[0].ne}, params "
                                 f"{node.op_params}) cannot run as {impl}: it needs {needs[1]}")


def conv_temp_size(node, impl, backend) -> int:
    """im2col: the F32 kernel (F16 kernels), the workers' GEMM panels and the capped im2col matrix; gemm_1x1:
    the F32 kernel, a contiguous F32 copy of the input when sgemm cannot read it in place, and the workers'
    GEMM panels; winograd: the transformed kernel and the
    workers' tiles (winograd.temp_size); direct: none."""
    _check_impl(node, impl)
    if impl == "direct":
        return 0
    if impl == "winograd":
        return winograd.temp_size(node, backend.scratch_budget, backend.n_threads)
    if impl == "gemm_1x1":
        wide, copy, panels = _gemm_1x1_bytes(node, backend)
        return wide + copy + backend.n_threads * panels
    wide, panels, cols = _im2col_parts(node, backend)
    return wide + backend.n_threads * panels + cols


def conv_choose(node, backend) -> str:
    """gemm_1x1 for pointwise convolutions, direct for tiny patches, winograd for 3x3 stride-1 convolutions
    with enough channels and tiles to keep its 16 products busy, else im2col."""
    if _is_1x1(node):
        return "gemm_1x1"
    _, _, _, _, ic, kh, kw = _geometry(node)
    if ic * kh * kw <= DIRECT_MAX_PATCH:
        return "direct"
    if winograd.worth_it(node):
        return "winograd"
    return "im2col"


def conv_name(node, impl) -> str:
    """e.g. conv2d_im2col, conv1d_gemm_1x1."""
    return ("conv1d_" if node.op == "conv_1d" else "conv2d_") + impl


def widen(b: BoundNode, arr, temp_offset):
    """(contiguous F32 copy of arr in the temp block, the launch that fills it, next temp offset)."""
    wide = b.temp[temp_offset:temp_offset + arr.size * 4].view(np.float32).reshape(arr.shape)
    return wide, launch(to_f32_rows, (wide, arr), b.threads_for(arr.size)), temp_offset + aligned(arr.size * 4)


def then(prepare, run):
    """run, preceded by the `prepare` steps (operand conversions into the temp block) when there are any."""
    if not prepare:
        return run

    def run_prepared():
        for step in prepare:
            step()
        run()
    return run_prepared


@register("conv_2d", "conv_1d", temp_size=conv_temp_size, name=conv_name, blas=True,
          impls=("im2col", "gemm_1x1", "winograd", "direct"), choose=conv_choose)
def bind_conv(b: BoundNode):
    node, impl = b.node, b.impl
    _check_impl(node, impl)
    d, a, x = _as_2d(node, [b.dst, b.srcs[0], b.srcs[1]])
    if d.size == 0:
        return None
    s0, s1, p0, p1, d0, d1 = _params(node)
    k = a.shape[1] * a.shape[2] * a.shape[3]
    flops = 2 * d.size * k
    nth = max(1, min(b.n_threads, flops // (1 << 18)))
    if impl == "direct":
        return launch(conv_direct_rows, (d, a, x, s0, s1, p0, p1, d0, d1), b.threads_for(flops // 2, 1 << 16))
    if impl == "winograd":
        return winograd.bind(b, d, a, x, nth)
    prepare, offset = [], 0
    if _kernel_f32_bytes(node):
        a, step, offset = widen(b, a, offset)
        prepare.append(step)
    w = a.reshape(a.shape[0], k)
    if impl == "gemm_1x1":
        layout = _b_layout(node)
        if layout is None:
            x, step, offset = widen(b, x, offset)
            prepare.append(step)
            layout = (False, x.shape[2] * x.shape[3], 4)
        trans_x, ldx, step_bytes = layout
        scratch, _ = worker_panels(b, offset, _gemm_1x1_bytes(node, b.backend)[2], nth)
        return then(prepare, launch(conv_1x1_rows, (SGEMM_ADDRESS, d, w, x, trans_x, ldx, step_bytes, scratch), nth))
    scratch, offset = worker_panels(b, offset, _im2col_parts(node, b.backend)[1], nth)
    cols = b.temp[offset:].view(np.float32)
    nth = max(1, min(nth, cols.size // k))
    chunk = min(cols.size // (k * nth), IM2COL_CHUNK)
    return then(prepare, launch(conv_im2col_rows, (SGEMM_ADDRESS, d, w, x, cols, chunk, scratch, a.shape[2],
                                                   a.shape[3], s0, s1, p0, p1, d0, d1), nth))


def worker_panels(b: BoundNode, offset: int, per_worker: int, nth: int):
    """(the workers' own-GEMM panels as (nth, floats) from the temp block, zero floats each when the product
    runs on BLAS; the temp offset after the n_threads workers' panels the plan reserved)."""
    if per_worker == 0:
        return np.empty((nth, 0), np.float32), offset
    panels = b.temp[offset:offset + nth * per_worker].view(np.float32).reshape(nth, per_worker // 4)
    return panels, offset + b.backend.n_threads * per_worker


def _im2col_as_2d(node, d, x):
    """The im2col node's output as (N, OH, OW, K) and input as (N, IC, IH, IW) (1-D: unit height)."""
    if node.op_params["is_2D"]:
        return d, x
    _, n, ol, k = d.shape
    d4 = np.lib.stride_tricks.as_strided(d, (n, 1, ol, k), (d.strides[1], d.strides[1], d.strides[2], d.strides[3]))
    _, n, ic, il = x.shape
    x4 = np.lib.stride_tricks.as_strided(x, (n, ic, 1, il), (x.strides[1], x.strides[2], x.strides[3] * il,
                                                             x.strides[3]))
    return d4, x4


@register("im2col")
def bind_im2col(b: BoundNode):
    node = b.node
    d, x = _im2col_as_2d(node, b.dst, b.srcs[1])
    a = node.src[0]
    kh, kw = (a.ne[1], a.ne[0]) if node.op_params["is_2D"] else (1, a.ne[0])
    s0, s1, p0, p1, d0, d1 = _params(node)
    if d.size == 0:
        return None
    nth = min(b.threads_for(d.size), d.shape[0] * d.shape[1])
    return launch(im2col_rows, (d, x, kh, kw, s0, s1, p0, p1, d0, d1), nth, constants=(2, 3))
