"""mul_mat on the CPU: each worker multiplies its share of the products, single-threaded.

dst[i3, i2] (N x M) = x[i3, i2] (N x K) @ a[i3 / r3, i2 / r2]^T, with arrays of shape (ne3, ne2, rows, ne0).
Work is split like ggml splits rows: over the (i3, i2) matrices, and over blocks of N rows when there are
fewer matrices than workers. Two implementations, chosen per node (or forced with
CPUBackend(force={"mul_mat": impl})):

gemm  ggpy's own sgemm (gemm.py): each worker packs a (M x K) once into its panels in the temp block and
      multiplies its rows of x against them; for products big enough to amortise the packing (M, K and the
      rows per matrix above GEMM_MIN_*) whose packed a fits the scratch budget, on AVX2/AVX-512 hosts.
blas  single-threaded BLAS sgemm, reading both operands in place.
An operand that cannot be read in place (F16, or no unit stride in either of its two inner dimensions) is
first converted to contiguous F32 in a temp block from the allocator's heap.

A block-quantized a (quants.py) runs as `q8` for products of few rows of x (generation) on x86 hosts with AVX2:
each worker quantizes x's rows into 8-bit blocks in its temp and takes integer dot products of its rows of a with
them (q8dot.py: ggml's CPU mat-vec; x's rounding to 8 bits costs ~0.5% relative error); as `dot`, exact: each worker
takes float32 dot products of its rows of a, dequantized in registers (or one at a time into a float32 row in L1),
with x's rows; or as `gemm` / `blas`: each worker dequantizes panels of PANEL_FLOATS of a's rows into its temp and
multiplies every matrix of x that uses them with the own GEMM (packed) or BLAS. All but q8 accumulate in float32
with x as it is. q8 also runs the decode patterns of ggpy/graph/fusion.py as one kernel: "glu" (gate and up products
of one x, quantized once, and act(gate) * up) and "mul_mat_add" (the product plus a residual).
"""
import numpy as np
from numba import int64, njit, typeof, types

from ....errors import UnsupportedOpError
from ...kernel import Fused
from ....types import F32
from ..registry import BoundNode, register, same_memory, vector
from . import gemm as own_gemm
from .blas import SGEMM_ADDRESS, sgemm
from .common import (
    NativeFunction,
    block,
    call_native,
    kernel,
    launch,
    scalar,
)
from .activations import EPILOGUE_FUNCS, epilogue_code
from .convert import to_f32_rows
from .q8dot import AVAILABLE as Q8_AVAILABLE, Q8_TILED, Q8_TYPES, QK, ROWS4, TILE_Q8, quantize_q8, quantize_row_q8
from .quants import CODES, DEQUANTIZE, DOT

EPILOGUE_ROWS = 256
"""Output rows a fused mul_mat multiplies per sgemm call before applying its epilogue to them (in cache)."""
GEMM_MIN_M, GEMM_MIN_K, GEMM_MIN_ROWS = 32, 16, 256
"""The own GEMM needs a full micro-tile of output columns, some depth, and at least this many rows of x per
matrix a, which each worker packs once."""
DOT_MAX_ROWS = 8
"""A quantized a multiplies at most this many rows of x per matrix by dot products (q8, else dot), more by
dequantized panels..."""
Q8_MAX_ROWS = 48
"""... except the 32-block types (Q8_TILED) on AVX2 hosts: up to this many by q8's register tiles (faster than
dequantized panels below ~48 rows of x: each weight block unpacked once for 8 rows, no float panel)."""
Q8_ROW_BLOCK = 32
"""Rows of a that q8 multiplies with all of x's rows (register tiles into a worker's tiles) before writing them."""
PANEL_FLOATS = 256 << 10
"""Dequantized floats of a per panel (1 MiB: few enough panels that repacking x for each costs little)."""


@scalar
def _task(t, d, a, nsplit):
    """(i3, i2, first row, end row, a3, a2) of task t: its matrix of d, its rows, and the matrix a[a3, a2]."""
    d3, d2, n = d.shape[0], d.shape[1], d.shape[2]
    i3 = t // (d2 * nsplit)
    i2 = (t // nsplit) % d2
    n0, n1 = block(n, t % nsplit, nsplit)
    return i3, i2, n0, n1, i3 // (d3 // a.shape[0]), i2 // (d2 // a.shape[1])


@scalar
def _epilogue(f, d, i3, i2, c0, c1, bias):
    """d[i3, i2, c0:c1] = f(d + bias) row by row (nothing without a bias)."""
    zero = np.float32(0.0)
    if bias.size:
        for r in range(c0, c1):
            row = d[i3, i2, r]
            for j in range(row.size):
                row[j] = f(row[j] + bias[j], zero, zero)


@kernel
def epilogue_rows(act, d, i3, i2, c0, c1, bias):
    """d[i3, i2, c0:c1] = act(d + bias) row by row: the tail of a fused add(mul_mat, bias) [+ activation],
    compiled per activation (act: an EPILOGUE_FUNCS code, a literal) and called by the product's workers
    through its address (epilogue()), so that the product kernels compile once for every activation."""
    _epilogue(EPILOGUE_FUNCS[act], d, i3, i2, c0, c1, bias)


def epilogue(act: str | None, d: np.ndarray, bias: np.ndarray):
    """The launch argument a product kernel calls as its fused epilogue on d: epilogue_rows for `act` (by
    address), or 0 when there is no bias (nothing fused)."""
    if not bias.size:
        return 0
    i = types.int64
    return NativeFunction(epilogue_rows, (types.literal(epilogue_code(act)), typeof(d), i, i, i, i, typeof(bias)))


@kernel
def mul_mat_rows(fn, epi, d, a, x, trans_a, lda, trans_x, ldx, bias, chunk, nsplit, ith, nth):
    """Worker ith's products by BLAS sgemm: tasks (matrix, row block) ith, ith + nth, ... of nmat * nsplit,
    `chunk` output rows per sgemm call. With a bias (size M), each chunk then gets d[row] = act(d[row] + bias)
    while it is in cache: a fused add(mul_mat, bias) [+ activation] by the epilogue at address epi
    (epilogue())."""
    m, k = d.shape[3], a.shape[3]
    work = np.empty(10, np.int32)
    for t in range(ith, d.shape[0] * d.shape[1] * nsplit, nth):
        i3, i2, n0, n1, a3, a2 = _task(t, d, a, nsplit)
        for c0 in range(n0, n1, chunk):
            c1 = min(n1, c0 + chunk)
            sgemm(fn, work, trans_a, trans_x, m, c1 - c0, k, a[a3, a2].ctypes.data, lda,
                  x[i3, i2].ctypes.data + c0 * x.strides[2], ldx, d[i3, i2].ctypes.data + c0 * d.strides[2],
                  d.strides[2] // 4)
            if epi:
                call_native(epi, (0, d, int64(i3), int64(i2), int64(c0), int64(c1), bias))


@kernel
def mul_mat_gemm_rows(epi, d, a, x, bias, chunk, nsplit, scratch, ith, nth):
    """mul_mat_rows by the own GEMM: the worker packs each matrix a it meets into its part of `scratch`
    (nth, floats) once, then multiplies its rows of x in chunks."""
    m, k = d.shape[3], a.shape[3]
    mine = scratch[ith]
    packed_size = own_gemm.packed_a_floats(m, k)
    ap, rest = mine[:packed_size], mine[packed_size:]
    packed = -1
    for t in range(ith, d.shape[0] * d.shape[1] * nsplit, nth):
        i3, i2, n0, n1, a3, a2 = _task(t, d, a, nsplit)
        which = a3 * a.shape[1] + a2
        if which != packed and n1 > n0:
            own_gemm.pack_a_rows(ap, a[a3, a2])
            packed = which
        for c0 in range(n0, n1, chunk):
            c1 = min(n1, c0 + chunk)
            own_gemm.gemm_prepacked(d[i3, i2].ctypes.data + c0 * d.strides[2], d.strides[2] // 4, m, ap,
                                    x[i3, i2, c0:c1], rest)
            if epi:
                call_native(epi, (0, d, int64(i3), int64(i2), int64(c0), int64(c1), bias))


def _blas_layout(arr: np.ndarray, transposed_if_rows: bool):
    """How sgemm reads the (rows x cols) matrices of `arr` in place: (transpose flag, leading dim), or None.

    Row-contiguous matrices are column-major (cols x rows) with ld = row stride; column-contiguous ones
    are column-major (rows x cols) with ld = column stride.
    """
    if arr.dtype != np.float32:
        return None
    rows, cols = arr.shape[2], arr.shape[3]
    s_row, s_col = arr.strides[2] // 4, arr.strides[3] // 4
    if cols == 1 or s_col == 1:
        ld = max(s_row if rows > 1 else cols, cols, 1)
        if rows == 1 or s_row >= cols:
            return transposed_if_rows, ld
    if rows == 1 or s_row == 1:
        ld = max(s_col if cols > 1 else rows, rows, 1)
        if cols == 1 or s_col >= rows:
            return not transposed_if_rows, ld
    return None


def _converted(node):
    """Which of (a, x) need converting to contiguous F32, judged from the node's types and strides (a quantized a
    never: its rows are dequantized as they are used)."""
    out = []
    for t in node.src[:2]:
        if t.type.quantized:
            out.append(False)
            continue
        view = np.lib.stride_tricks.as_strided(np.empty(1, np.float32 if t.type.size == 4 else np.float16),
                                               tuple(reversed(t.ne)), tuple(reversed(t.nb)))
        out.append(t.type.dtype != np.float32 or _blas_layout(view, True) is None)
    return out


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


def _gemm_panels_bytes(node, backend) -> int:
    """One worker's temp for the own GEMM: a packed, x's panels and the edge tile; 0 where BLAS suits better
    (products too small to amortise the packing) or the workers' panels would take more than half of what the
    scratch budget leaves after the operand copies."""
    a = node.src[0]
    m, k = node.ne[0], a.ne[0]
    rows = node.ne[1] * (node.ne[2] * node.ne[3] if a.ne[2] * a.ne[3] == 1 else 1)
    if m < GEMM_MIN_M or k < GEMM_MIN_K or rows < GEMM_MIN_ROWS:
        return 0
    return own_gemm.panel_bytes(own_gemm.prepacked_floats(m, rows, k), backend.n_threads,
                                backend.scratch_budget - _copies_bytes(node))


def _x_rows(node) -> int:
    """Rows of x per matrix of a (all of x's rows when a is one matrix, which _merge_batches multiplies at once)."""
    return node.ne[1] * (node.ne[2] * node.ne[3] if node.src[0].ne[2] * node.src[0].ne[3] == 1 else 1)


def mul_mat_choose(node, backend) -> str:
    """gemm on hosts with its vector width for products that amortise its packing, else blas; for a quantized a,
    q8 (dot without AVX2, or for a type without integer dots) for few rows of x (Q8_MAX_ROWS for the tiled types),
    else gemm (blas without the own GEMM's vector width)."""
    t, rows = node.src[0].type, _x_rows(node)
    if t.quantized:
        if Q8_AVAILABLE and t in Q8_TYPES and rows <= (Q8_MAX_ROWS if t in Q8_TILED else DOT_MAX_ROWS):
            return "q8"
        if rows <= DOT_MAX_ROWS:
            return "dot"
        return "gemm" if own_gemm.available() else "blas"
    return "gemm" if _gemm_panels_bytes(node, backend) else "blas"


def _check_impl(node, impl, backend):
    a = node.src[0]
    if impl in ("dot", "q8") and not a.type.quantized:
        raise UnsupportedOpError(f"cpu: mul_mat '{node.name}' (a {a.type.name} ne={a.ne}) cannot run as {impl}: {impl} "
                                 "takes a quantized a only")
    if impl == "q8" and a.type.quantized and a.type not in Q8_TYPES:
        raise UnsupportedOpError(f"cpu: mul_mat '{node.name}' (a {a.type.name} ne={a.ne}) cannot run as q8: q8 takes "
                                 f"{', '.join(t.name for t in Q8_TYPES)}")
    if (impl == "gemm" and a.type.quantized and not own_gemm.available()) or (impl == "q8" and not Q8_AVAILABLE):
        raise UnsupportedOpError(f"cpu: mul_mat '{node.name}' (a {a.type.name} ne={a.ne}) cannot run as {impl}: it "
                                 "needs a host with AVX2 (or AVX-512)")
    if impl == "gemm" and not a.type.quantized and not _gemm_panels_bytes(node, backend):
        raise UnsupportedOpError(f"cpu: mul_mat '{node.name}' (a ne={node.src[0].ne}, b ne={node.src[1].ne}) "
                                 f"cannot run as gemm: it needs M >= {GEMM_MIN_M}, K >= {GEMM_MIN_K}, at least "
                                 f"{GEMM_MIN_ROWS} rows of b per matrix a, and panels within half the scratch "
                                 f"budget ({backend.scratch_budget} bytes)")


def mul_mat_temp_size(node, impl, backend) -> int:
    """Bytes for contiguous F32 copies of the operands that cannot be read in place, and (gemm) the workers'
    panels."""
    _check_impl(node, impl, backend)
    if impl == "q8":
        return _copies_bytes(node) + backend.n_threads * _q8_scratch_bytes(node)
    if node.src[0].type.quantized:
        return _copies_bytes(node) + backend.n_threads * _quant_scratch_floats(node, impl, backend.n_threads) * 4
    return _copies_bytes(node) + (backend.n_threads * _gemm_panels_bytes(node, backend) if impl == "gemm" else 0)


def _copies_bytes(node) -> int:
    return sum(_aligned(t.nelements * 4) for t, conv in zip(node.src[:2], _converted(node)) if conv)


def _kernel_name(node, impl) -> str:
    conv = "+to_f32" if any(_converted(node)) else ""
    if node.src[0].type.quantized:
        return f"{impl}_{node.src[0].type.name}{conv}"
    return ("gemm" if impl == "gemm" else "blas_sgemm") + conv


def _run_epilogue(b: BoundNode, fused):
    """The fusion pass's epilogue (bias, activation) of a mul_mat into the last node's memory."""
    b.dst = b.dst.reshape(tuple(reversed(fused.head.ne)))
    return bind_mul_mat_epilogue(b, vector(fused.bias), fused.act)


@register("mul_mat", temp_size=mul_mat_temp_size, name=_kernel_name, blas=True, impls=("gemm", "blas", "dot", "q8"),
          choose=mul_mat_choose, fuses={
              "epilogue": Fused(_run_epilogue, act=True, takes=lambda node, impl: node.type.size == 4 and
                                not node.src[0].type.quantized),
              "glu": Fused(lambda b, fusion: _run_glu(b, fusion), takes=lambda node, impl: impl == "q8",
                           accepts=lambda fusion: _glu_accepts(fusion)),
              "mul_mat_add": Fused(lambda b, fusion: _run_mul_mat_add(b, fusion), takes=lambda node, impl: impl == "q8",
                                   accepts=lambda fusion: _add_accepts(fusion))})
def bind_mul_mat(b: BoundNode):
    return bind_mul_mat_epilogue(b)


def bind_mul_mat_epilogue(b: BoundNode, bias: np.ndarray | None = None, act: str | None = None):
    """mul_mat into b.dst, optionally followed by d = act(d + bias) (bias float32 (M,), act a unary op name)
    applied per block of rows by the same workers: a fused `add(mul_mat(a, x), bias)` [+ activation]."""
    d = b.dst
    operands, prepare, offset = [], [], 0
    for arr, conv in zip(b.srcs[:2], _converted(b.node)):
        if conv:
            wide = b.temp[offset:offset + arr.size * 4].view(np.float32).reshape(arr.shape)
            offset += _aligned(arr.size * 4)
            prepare.append(launch(to_f32_rows, (wide, arr), b.threads_for(arr.size)))
            arr = wide
        operands.append(arr)
    a, x = _merge_batches(d, *operands)
    d = d.reshape(x.shape[:3] + (d.shape[3],))
    if b.node.src[0].type.quantized:
        return _bind_quantized(b, d, a, x, b.temp[offset:].view(np.float32), prepare)
    per_worker = _gemm_panels_bytes(b.node, b.backend) if b.impl == "gemm" else 0
    trans_a, lda = _blas_layout(a, True)
    trans_x, ldx = _blas_layout(x, False)
    nmat = d.shape[0] * d.shape[1]
    flops = 2 * d.size * a.shape[3]
    nth = max(1, min(b.n_threads, flops // (1 << 18)))
    nsplit = max(1, -(-nth // nmat)) if nmat < nth else 1
    if d.size == 0:
        return None
    fused = bias is not None or act is not None
    bias = (np.zeros(d.shape[3], np.float32) if bias is None else bias) if fused else np.empty(0, np.float32)
    chunk = EPILOGUE_ROWS if fused else max(1, d.shape[2])
    if per_worker:
        scratch = b.temp[offset:offset + nth * per_worker].view(np.float32).reshape(nth, per_worker // 4)
        run = launch(mul_mat_gemm_rows, (epilogue(act, d, bias), d, a, x, bias, chunk, nsplit, scratch), nth)
    else:
        run = launch(mul_mat_rows, (SGEMM_ADDRESS, epilogue(act, d, bias), d, a, x, trans_a, lda, trans_x, ldx, bias,
                                    chunk, nsplit), nth)
    return _after(prepare, run)


def _after(prepare: list, run):
    """run, after the operand conversions in `prepare`."""
    if not prepare:
        return run

    def run_converted():
        for step in prepare:
            step()
        run()
    return run_converted


def _merge_batches(d, a, x):
    """One matrix a applied to a batch of row-contiguous, evenly strided x matrices (and contiguous d) is
    one GEMM over all their rows: return (a, x) with x seen as (1, 1, B * N, K) when that holds."""
    b3, b2, n, k = x.shape
    if a.shape[0] * a.shape[1] != 1 or b3 * b2 == 1 or not d.flags.c_contiguous:
        return a, x
    s3, s2, s1, s0 = x.strides
    if s0 != 4 or s2 != n * s1 or (b3 > 1 and s3 != b2 * s2):
        return a, x
    return a, np.lib.stride_tricks.as_strided(x, (1, 1, b3 * b2 * n, k), (0, 0, s1, s0))


# -- a block-quantized a ------------------------------------------------------------------------------------

@scalar
def dot_f32(u, v):
    """sum(u * v) of two float32 vectors, in float32 (vectorised where the caller reassociates)."""
    s = np.float32(0.0)
    for i in range(u.size):
        s += u[i] * v[i]
    return s


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def mul_mat_dot_rows(code, d, a, x, rows, ith, nth):
    """d[i3, i2, n, r] = dot(row r of a[a3, a2], x[i3, i2, n]) for worker ith's block of the M rows of every matrix:
    DOT's dot products for one row of x (unit stride), else each row of a dequantized once into rows[ith] (K floats)
    and its dot products with x's rows. (Reassociated: dot_f32's sums vectorise.)"""
    f, g = DEQUANTIZE[code], DOT[code]
    b3, b2, n, m = d.shape
    mine = rows[ith]
    m0, m1 = block(m, ith, nth)
    for i3 in range(b3):
        for i2 in range(b2):
            aa = a[i3 // (b3 // a.shape[0]), i2 // (b2 // a.shape[1])]
            if n == 1 and x.strides[3] == 4:
                for r in range(m0, m1):
                    d[i3, i2, 0, r] = g(aa[r], x[i3, i2, 0])
                continue
            for r in range(m0, m1):
                f(mine, aa[r])
                for j in range(n):
                    d[i3, i2, j, r] = dot_f32(mine, x[i3, i2, j])


@kernel
def mul_mat_panel_rows(fn, code, d, a, x, trans_x, ldx, panel_rows, scratch, ith, nth):
    """Tasks (a3, a2, panel) ith, ith + nth, ...: `panel_rows` rows of a[a3, a2] dequantized into this worker's
    scratch, then d[i3, i2, :, panel] = x[i3, i2] @ panel^T for every matrix of x that uses a[a3, a2]: by BLAS sgemm
    at address fn, or (fn == 0) by the own GEMM from the panel packed once."""
    f = DEQUANTIZE[code]
    b3, b2, n, m = d.shape
    a3n, a2n, k = a.shape[0], a.shape[1], x.shape[3]
    npanel = (m + panel_rows - 1) // panel_rows
    mine = scratch[ith]
    panel = mine[:panel_rows * k].reshape(panel_rows, k)
    ap = mine[panel_rows * k:panel_rows * k + own_gemm.packed_a_floats(panel_rows, k)]
    rest = mine[panel_rows * k + ap.size:]
    work = np.empty(10, np.int32)
    for t in range(ith, a3n * a2n * npanel, nth):
        a3, a2, r0 = t // (a2n * npanel), (t // npanel) % a2n, (t % npanel) * panel_rows
        rows = min(panel_rows, m - r0)
        for p0 in range(0, rows, own_gemm.MR if not fn else rows):    # the own GEMM: packed a micro-panel at a time
            for r in range(p0, min(rows, p0 + own_gemm.MR if not fn else rows)):
                f(panel[r - p0], a[a3, a2, r0 + r])
            if not fn:
                own_gemm.pack_a_micro(ap, panel[:min(own_gemm.MR, rows - p0)], p0, rows)
        for i3 in range(a3 * (b3 // a3n), (a3 + 1) * (b3 // a3n)):
            for i2 in range(a2 * (b2 // a2n), (a2 + 1) * (b2 // a2n)):
                c = d[i3, i2].ctypes.data + 4 * r0
                if fn:
                    sgemm(fn, work, True, trans_x, rows, n, k, panel.ctypes.data, k, x[i3, i2].ctypes.data, ldx, c,
                          d.strides[2] // 4)
                else:
                    own_gemm.gemm_prepacked(c, d.strides[2] // 4, rows, ap, x[i3, i2], rest)


def _panel_rows(node, n_threads: int) -> int:
    """Rows of a per dequantized panel: at most PANEL_FLOATS of them, a multiple of 32 (the GEMM's micro-tile), as
    many panels as make whole rounds of the workers."""
    m, k = node.ne[0], node.src[0].ne[0]
    most = max(32, PANEL_FLOATS // k // 32 * 32)
    panels = n_threads * -(-m // (n_threads * most))
    per_panel = -(-m // panels)
    return min(m, -(-per_panel // 32) * 32)


def _quant_scratch_floats(node, impl, n_threads: int) -> int:
    """Floats of one worker's scratch for a quantized a: a dequantized row (dot), or a panel and, for the own GEMM,
    the panel packed and x's panels."""
    k = node.src[0].ne[0]
    if impl == "dot":
        return (k + 15) // 16 * 16
    p = _panel_rows(node, n_threads)
    packed = own_gemm.prepacked_floats(p, _x_rows(node), k) if impl == "gemm" else 0
    return (p * k + packed + 15) // 16 * 16


def _bind_quantized(b: BoundNode, d, a, x, temp, prepare: list):
    """mul_mat with a quantized a (block bytes) into d, x float32 (converted by `prepare` where needed)."""
    node, code = b.node, CODES[b.node.src[0].type]
    if d.size == 0:
        return None
    nth = max(1, min(b.n_threads, 2 * d.size * x.shape[3] // (1 << 18)))
    if b.impl == "q8":
        return _after(prepare, _launch_q8(b, d, a, x, temp, code))
    per = _quant_scratch_floats(node, b.impl, b.n_threads)
    scratch = temp[:nth * per].reshape(nth, per)
    if b.impl == "dot":
        run = launch(mul_mat_dot_rows, (code, d, a, x, scratch), min(nth, d.shape[3]), constants=(0,))
        return _after(prepare, run)
    trans_x, ldx = _blas_layout(x, False)
    fn = SGEMM_ADDRESS if b.impl == "blas" else 0
    args = (fn, code, d, a, x, trans_x, ldx, _panel_rows(node, b.n_threads), scratch)
    return _after(prepare, launch(mul_mat_panel_rows, args, nth, constants=(1,)))


# -- a block-quantized a on integer dot products ---------------------------------------------------------------

@kernel
def mul_mat_q8_rows(code, code_up, act, d, a, up, x, res, xf, xq, xds, xt, tiles, ith, nth):
    """d[i3, i2, n, r] = dot(row r of a[a3, a2], x[i3, i2, n]) for worker ith's block of the M rows of every matrix, on
    integer dot products: the worker first quantizes the matrix's rows of x into its activation blocks xq[ith],
    xds[ith] (q8dot.py; a row of x with no unit stride is gathered into xf[ith] first; the (d, s) pairs transposed
    into xt[ith]), then multiplies Q8_ROW_BLOCK rows of a at a time with all of them by register tiles (TILE_Q8) into
    tiles[ith]. Fused (arrays with elements): with `up` (of type code_up, a's shape), d = act(a . x) * (up . x) (the
    glu pattern: a the gate); with `res` (d's shape), d += res (mul_mat_add)."""
    g, h, f = TILE_Q8[code], TILE_Q8[code_up], EPILOGUE_FUNCS[act]
    zero = np.float32(0.0)
    b3, b2, n, m = d.shape
    q, ds, row, xt_, out = xq[ith], xds[ith], xf[ith], xt[ith], tiles[ith]
    nb = q.shape[1] // QK
    m0, m1 = block(m, ith, nth)
    for i3 in range(b3):
        for i2 in range(b2):
            for j in range(n):
                src = x[i3, i2, j]
                if x.strides[3] != 4:
                    row[:] = src
                    src = row
                quantize_row_q8(q[j], ds[j], src)
                if ROWS4 and n == 1:
                    quantize_q8(1, src.ctypes.data, xt_.ctypes.data, xt_.ctypes.data + (nb + 3) // 4 * 128, nb)
                for t in range(0 if ROWS4 and n == 1 else nb):
                    xt_[t, j], xt_[nb + t, j] = ds[j, 2 * t], ds[j, 2 * t + 1]
            a3, a2 = i3 // (b3 // a.shape[0]), i2 // (b2 // a.shape[1])
            aa = a[a3, a2]
            uu = up[a3, a2] if up.size else aa
            for r0 in range(m0, m1, Q8_ROW_BLOCK):
                r1 = min(m1, r0 + Q8_ROW_BLOCK)
                g(aa, r0, r1, q, ds, xt_, out[0])
                if up.size:
                    h(uu, r0, r1, q, ds, xt_, out[1])
                for j in range(n):
                    dst, got = d[i3, i2, j, r0:r1], out[0, j, :r1 - r0]
                    if up.size:
                        for i in range(r1 - r0):
                            dst[i] = f(got[i], zero, zero) * out[1, j, i]
                    else:
                        dst[:] = got
                    if res.size:
                        dst += res[i3, i2, j, r0:r1]


def _q8_scratch_bytes(node) -> int:
    """One worker's temp for q8 (_q8_layout): x's rows per matrix as activation blocks (K int8, and two float32 per
    32, twice: as pairs and transposed, or with ROWS4 one row grouped), a float32 row of x, and two tiles of products
    (rows of x x Q8_ROW_BLOCK floats)."""
    return sum(size for size, _, _ in _q8_layout(_x_rows(node), node.src[0].ne[0]))


def _q8_layout(n: int, k: int) -> tuple:
    """(bytes, dtype, shape) of a worker's xf, xq, xds, xt, tiles."""
    xt = k // QK * 2 + (-(-k // 128) * 40 if ROWS4 and n == 1 else 0)
    parts = ((np.float32, (k,)), (np.int8, (n, k)), (np.float32, (n, k // QK * 2)), (np.float32, (xt, n)),
             (np.float32, (2, n, Q8_ROW_BLOCK)))
    return tuple((_aligned(np.dtype(t).itemsize * int(np.prod(shape))), t, shape) for t, shape in parts)


def _q8_scratch(temp: np.ndarray, nth: int, x: np.ndarray) -> tuple:
    """The workers' (xf, xq, xds, xt, tiles) in temp, laid out as _q8_layout says."""
    layout = _q8_layout(x.shape[2], x.shape[3])
    per, out, at = sum(size for size, _, _ in layout), [], 0
    workers = temp.view(np.uint8)[:nth * per].reshape(nth, per)
    for size, dtype, shape in layout:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        out.append(workers[:, at:at + count].view(dtype).reshape((nth,) + shape))
        at += size
    return tuple(out)


def _launch_q8(b: BoundNode, d, a, x, temp, code, up=None, code_up=None, act=None, res=None):
    """mul_mat_q8_rows on q8's scratch in temp: d = a . x (a of type `code`), or act(a . x) * (up . x) (up of type
    code_up), [+ res]."""
    work = 2 * d.size * x.shape[3] * (1 if up is None else 2)
    nth = max(1, min(b.n_threads, work // (1 << 18), d.shape[3]))
    args = (code, code if code_up is None else code_up, epilogue_code(act), d, a,
            np.empty((0,) * 4, np.uint8) if up is None else up, x, np.empty((0,) * 4, np.float32) if res is None else res)
    return launch(mul_mat_q8_rows, args + _q8_scratch(temp, nth, x), nth, constants=(0, 1, 2))


def _q8_fusable(head) -> bool:
    """Whether the fused q8 kernels take the product `head`: one matrix a, one matrix x of F32 read in place."""
    a, x = head.src[:2]
    return a.ne[2] * a.ne[3] == 1 and x.ne[2] * x.ne[3] == 1 and x.type == F32 and not any(_converted(head))


def _glu_accepts(fusion) -> bool:
    g, u, mul = fusion.w_gate, fusion.w_up, fusion.mul
    return (g.type in Q8_TYPES and u.type in Q8_TYPES and g.ne == u.ne and mul.type == F32 and mul.is_contiguous()
            and _q8_fusable(fusion.head))


def _run_glu(b: BoundNode, fusion):
    """act(gate) * up of the two products of one x (the glu pattern) by one q8 kernel into the mul's memory."""
    x = b.srcs[1]
    g, u = fusion.w_gate, fusion.w_up
    d = b.dst.reshape(x.shape[:3] + (g.ne[1],))
    return _launch_q8(b, d, g.buffer.kernel_view(g), x, b.temp, CODES[g.type], up=u.buffer.kernel_view(u),
                      code_up=CODES[u.type], act=fusion.act)


def _add_accepts(fusion) -> bool:
    r, add = fusion.residual, fusion.add
    return (fusion.head.type == r.type == add.type == F32 and r.is_contiguous() and add.is_contiguous()
            and _q8_fusable(fusion.head))


def _run_mul_mat_add(b: BoundNode, fusion):
    """mul_mat + a residual add (the mul_mat_add pattern) by one q8 kernel into the add's memory (None where the
    residual lies partly over it)."""
    x = b.srcs[1]
    shape = x.shape[:3] + (b.node.ne[0],)
    d = b.dst.reshape(shape)
    res = fusion.residual.buffer.kernel_view(fusion.residual).reshape(shape)
    if np.may_share_memory(d, res) and not same_memory(d, res):
        return None
    return _launch_q8(b, d, b.srcs[0], x, b.temp, CODES[b.node.src[0].type], res=res)
