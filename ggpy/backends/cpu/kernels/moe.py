"""mul_mat_id on the CPU: each worker takes a block of the M rows of every expert's matrix and multiplies each row
with the rows of b of the slots (token, expert slot) that chose that expert; an expert no slot chose is never read,
so one token reads only its experts' rows.

Arrays: d (1, T, U, M), as (1, n_expert, M, K) (a quantized type's rows as block bytes, F16/BF16 as bits), b (1, T,
B1, K) float32, ids (1, 1, T, U) int32. Two implementations (CPUBackend(force={"mul_mat_id": impl})):

q8   a quantized as on integer dot products (q8dot.py, mul_mat's q8: each worker quantizes b's rows into 8-bit
     blocks in its temp first), the default on AVX2 hosts for the types q8dot has;
dot  exact float32: a row of the expert dequantized (or converted) once into the worker's temp and dotted with
     every slot's row of b (a quantized row with a single slot: quants.DOT, dequantized in registers).
grouped  prompts (the default from GROUPED_MIN_TOKENS tokens where the own GEMM runs): the slots listed by expert
     once per worker (a counting sort), then tasks (expert, panel of rows): the panel dequantized once and packed,
     multiplied with that expert's slots' rows of b (gathered, GROUPED_COLS at a time) by the own GEMM (gemm.py),
     the products scattered to dst; exact float32.
"""
import numpy as np

from ....errors import RowIndexError, UnsupportedOpError
from ..registry import BoundNode, register
from . import gemm as own_gemm
from .common import block, kernel, launch, scalar
from .fp16 import load
from .matmul import dot_f32
from .q8dot import AVAILABLE as Q8_AVAILABLE, DOT_Q8, QK, quantize_row_q8
from .quants import CODES, DEQUANTIZE, DOT


@scalar
def _slots(ids, ex, out):
    """How many slots t * U + e chose expert ex (ids[t, e] == ex), listed in out."""
    n, used = 0, ids.shape[3]
    for t in range(ids.shape[2]):
        for e in range(used):
            if ids[0, 0, t, e] == ex:
                out[n] = t * used + e
                n += 1
    return n


@kernel
def mul_mat_id_float(d, a, x, ids, rows, bad, ith, nth):
    """d[t, e, r] = as[ids[t, e], r] . x[t, e % B1] for worker ith's block of rows r, as F32/F16/BF16: each row
    converted once into rows[ith] (K float32). bad[ith]: the slots whose expert is outside [0, n_expert)."""
    used, m = d.shape[2], d.shape[3]
    slots = np.empty(d.shape[1] * used, np.int64)
    row = rows[ith]
    m0, m1 = block(m, ith, nth)
    found = 0
    for ex in range(a.shape[1]):
        n = _slots(ids, ex, slots)
        found += n
        for r in range(m0, m1 if n else m0):
            src = a[0, ex, r]
            for i in range(row.size):
                row[i] = load(src[i])
            for s in range(n):
                t, e = slots[s] // used, slots[s] % used
                d[0, t, e, r] = dot_f32(row, x[0, t, e % x.shape[2]])
    bad[ith] = slots.size - found


@kernel
def mul_mat_id_dot(code, d, a, x, ids, rows, bad, ith, nth):
    """mul_mat_id_float for a quantized as (type `code`): quants.DOT for a row one slot chose, else the row
    dequantized into rows[ith] once and dotted with each slot's row of b."""
    f, g = DEQUANTIZE[code], DOT[code]
    used, m, b1 = d.shape[2], d.shape[3], x.shape[2]
    slots = np.empty(d.shape[1] * used, np.int64)
    row = rows[ith]
    m0, m1 = block(m, ith, nth)
    found = 0
    for ex in range(a.shape[1]):
        n = _slots(ids, ex, slots)
        found += n
        for r in range(m0, m1 if n else m0):
            src = a[0, ex, r]
            if n > 1:
                f(row, src)
            for s in range(n):
                t, e = slots[s] // used, slots[s] % used
                if n > 1:
                    d[0, t, e, r] = dot_f32(row, x[0, t, e % b1])
                else:
                    row[:] = x[0, t, e % b1]
                    d[0, t, e, r] = g(src, row)
    bad[ith] = slots.size - found


@kernel
def mul_mat_id_q8(code, d, a, x, ids, rows, xq, xds, bad, ith, nth):
    """mul_mat_id_dot on integer dot products: b's rows first quantized into xq[ith], xds[ith] (through rows[ith])."""
    h = DOT_Q8[code]
    used, m, b1 = d.shape[2], d.shape[3], x.shape[2]
    slots = np.empty(d.shape[1] * used, np.int64)
    row, q, ds = rows[ith], xq[ith], xds[ith]
    for t in range(x.shape[1]):
        for j in range(b1):
            row[:] = x[0, t, j]
            quantize_row_q8(q[t * b1 + j], ds[t * b1 + j], row)
    m0, m1 = block(m, ith, nth)
    found = 0
    for ex in range(a.shape[1]):
        n = _slots(ids, ex, slots)
        found += n
        for r in range(m0, m1 if n else m0):
            for s in range(n):
                t, e = slots[s] // used, slots[s] % used
                d[0, t, e, r] = h(a[0, ex, r], q[t * b1 + e % b1], ds[t * b1 + e % b1])
    bad[ith] = slots.size - found


GROUPED_MIN_TOKENS = 32     # tokens from which `grouped` is the default (Q8_0 48 x 256 x 512, 2 threads: q8
#                             faster at 16 tokens, the same at 32, grouped 1.7x at 64)
GROUPED_COLS = 256          # slots of one expert a GEMM call takes
GROUPED_PANEL_FLOATS = 32768    # a panel of the expert's rows (dequantized): at most this many floats


@scalar
def _by_expert(ids, n_expert, order, first):
    """The slots t * U + e in order, grouped by expert (counting sort): expert ex's in order[first[ex]:first[ex +
    1]]. Returns how many slots' experts are outside [0, n_expert) (listed nowhere)."""
    used = ids.shape[3]
    first[:] = 0
    for t in range(ids.shape[2]):
        for e in range(used):
            ex = ids[0, 0, t, e]
            if 0 <= ex < n_expert:
                first[ex + 1] += 1
    for ex in range(n_expert):
        first[ex + 1] += first[ex]
    fill = first[:n_expert].copy()
    for t in range(ids.shape[2]):
        for e in range(used):
            ex = ids[0, 0, t, e]
            if 0 <= ex < n_expert:
                order[fill[ex]] = t * used + e
                fill[ex] += 1
    return ids.shape[2] * used - first[n_expert]


@scalar
def _grouped_panel(d, x, panel, rows, r0, slots, parts):
    """d[t, e, r0:r0 + rows] = panel[:rows] @ x[t, e % B1] for the slots t * U + e: the panel packed, then the own
    GEMM on the slots' rows of b gathered GROUPED_COLS at a time. parts: this worker's (packed panel, gathered rows,
    products, the GEMM's rest)."""
    ap, xs, c, rest = parts
    used, b1 = d.shape[2], x.shape[2]
    for p0 in range(0, rows, own_gemm.MR):
        own_gemm.pack_a_micro(ap, panel[p0:min(rows, p0 + own_gemm.MR)], p0, rows)
    for j0 in range(0, slots.size, GROUPED_COLS):
        n = min(GROUPED_COLS, slots.size - j0)
        for j in range(n):
            t, e = slots[j0 + j] // used, slots[j0 + j] % used
            xs[j] = x[0, t, e % b1]
        own_gemm.gemm_prepacked(c.ctypes.data, rows, rows, ap, xs[:n], rest)
        for j in range(n):
            t, e = slots[j0 + j] // used, slots[j0 + j] % used
            d[0, t, e, r0:r0 + rows] = c[j * rows:(j + 1) * rows]


@scalar
def _grouped_parts(mine, p, k):
    """A worker's scratch cut as _grouped_scratch says: (panel (p, k), packed panel, gathered rows, products,
    rest)."""
    at, packed = p * k, own_gemm.packed_a_floats(p, k)
    panel = mine[:at].reshape(p, k)
    ap = mine[at:at + packed]
    at += packed
    xs = mine[at:at + GROUPED_COLS * k].reshape(GROUPED_COLS, k)
    at += GROUPED_COLS * k
    return panel, (ap, xs, mine[at:at + GROUPED_COLS * p], mine[at + GROUPED_COLS * p:])


@scalar
def _tasks(ids, n_expert, m, p, order, first, bad, ith, nth):
    """Worker ith's tasks (expert, first row of a panel of p rows) over the experts some slot chose, as an (n, 2)
    array; the slots sorted by expert into order, first (_by_expert), the slots out of range counted in bad[ith]."""
    bad[ith] = _by_expert(ids, n_expert, order, first)
    npanel = (m + p - 1) // p
    out = np.empty(((n_expert * npanel + nth - 1) // nth, 2), np.int64)
    n = 0
    for task in range(ith, n_expert * npanel, nth):
        if first[task // npanel + 1] > first[task // npanel]:
            out[n, 0], out[n, 1] = task // npanel, task % npanel * p
            n += 1
    return out[:n]


@kernel
def mul_mat_id_grouped(code, d, a, x, ids, scratch, p, order, first, bad, ith, nth):
    """The grouped implementation for a quantized as (type `code`): worker ith's tasks (expert, panel of p rows)
    dequantized (quants.DEQUANTIZE) and multiplied by _grouped_panel."""
    f, m, k = DEQUANTIZE[code], d.shape[3], x.shape[3]
    order, first = order[ith], first[ith]
    panel, parts = _grouped_parts(scratch[ith], p, k)
    tasks = _tasks(ids, a.shape[1], m, p, order, first, bad, ith, nth)
    for i in range(tasks.shape[0]):
        ex, r0 = tasks[i, 0], tasks[i, 1]
        rows = min(p, m - r0)
        for r in range(rows):
            f(panel[r], a[0, ex, r0 + r])
        _grouped_panel(d, x, panel, rows, r0, order[first[ex]:first[ex + 1]], parts)


@kernel
def mul_mat_id_grouped_float(d, a, x, ids, scratch, p, order, first, bad, ith, nth):
    """mul_mat_id_grouped for an F32/F16/BF16 as: the panel's rows converted to float32."""
    m, k = d.shape[3], x.shape[3]
    order, first = order[ith], first[ith]
    panel, parts = _grouped_parts(scratch[ith], p, k)
    tasks = _tasks(ids, a.shape[1], m, p, order, first, bad, ith, nth)
    for i in range(tasks.shape[0]):
        ex, r0 = tasks[i, 0], tasks[i, 1]
        rows = min(p, m - r0)
        for r in range(rows):
            src = a[0, ex, r0 + r]
            for i in range(k):
                panel[r, i] = load(src[i])
        _grouped_panel(d, x, panel, rows, r0, order[first[ex]:first[ex + 1]], parts)


def _q8(t) -> bool:
    """Whether q8dot has integer dot products for type t (a prefix of the quantized types)."""
    return t.quantized and Q8_AVAILABLE and CODES[t] < len(DOT_Q8)


def _check_impl(node, impl):
    a = node.src[0]
    if impl == "grouped" and not own_gemm.available():
        raise UnsupportedOpError(f"cpu: mul_mat_id '{node.name}' cannot run as grouped: the own GEMM needs AVX2 and FMA "
                                 "(or AVX-512)")
    if impl == "q8" and not _q8(a.type):
        raise UnsupportedOpError(f"cpu: mul_mat_id '{node.name}' (as {a.type.name} ne={a.ne}) cannot run as q8: it "
                                 "takes a quantized as of a type with integer dot products, on a host with AVX2")


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


def _scratch(node, impl) -> tuple:
    """One worker's temp: a float32 row of K, and for q8 b's rows (T * B1) as int8 blocks and their (d, s) pairs."""
    k, b = node.src[0].ne[0], node.src[1]
    n = b.ne[1] * b.ne[2] if impl == "q8" else 0
    return _aligned(4 * k), _aligned(n * k), _aligned(n * k // QK * 8)


def _panel_rows(node) -> int:
    """Rows of an expert a grouped task dequantizes: at most GROUPED_PANEL_FLOATS floats, a multiple of the GEMM's MR."""
    m, k = node.ne[0], node.src[0].ne[0]
    return min(-(-m // own_gemm.MR) * own_gemm.MR, max(own_gemm.MR, GROUPED_PANEL_FLOATS // k // own_gemm.MR * own_gemm.MR))


def _grouped_scratch(node) -> int:
    """Floats of one worker's grouped scratch: the panel, packed, b's gathered rows, the products, the GEMM's rest;
    then (order, first): the slots by expert (int64)."""
    p, k = _panel_rows(node), node.src[0].ne[0]
    return p * k + own_gemm.prepacked_floats(p, GROUPED_COLS, k) + GROUPED_COLS * (k + p)


def _grouped_ints(node) -> int:
    return node.ne[1] * node.ne[2] + node.src[0].ne[2] + 1


def temp_size(node, impl, backend) -> int:
    _check_impl(node, impl)
    if impl == "grouped":
        return backend.n_threads * (_aligned(4 * _grouped_scratch(node)) + _aligned(8 * _grouped_ints(node)))
    return backend.n_threads * sum(_scratch(node, impl))


def choose(node, backend) -> str:
    if node.ne[2] >= GROUPED_MIN_TOKENS and own_gemm.available():
        return "grouped"
    return "q8" if _q8(node.src[0].type) else "dot"


def _views(temp, nth, node, impl, k) -> tuple:
    """The workers' (rows, xq, xds) in temp, laid out as _scratch says."""
    sizes = _scratch(node, impl)
    workers = temp[:nth * sum(sizes)].reshape(nth, sum(sizes))
    n = node.src[1].ne[1] * node.src[1].ne[2] if impl == "q8" else 0
    rows = workers[:, :4 * k].view(np.float32)
    xq = workers[:, sizes[0]:sizes[0] + n * k].view(np.int8).reshape(nth, n, k)
    xds = workers[:, sizes[0] + sizes[1]:sizes[0] + sizes[1] + n * k // QK * 8].view(np.float32).reshape(
        nth, n, k // QK * 2)
    return rows, xq, xds


def _bind_grouped(b: BoundNode, d, a, x, ids, bad):
    """The grouped kernel on the workers' parts of temp: their scratch floats, then their slots by expert."""
    node = b.node
    floats, ints = _aligned(4 * _grouped_scratch(node)), _aligned(8 * _grouped_ints(node))
    nth = b.n_threads
    scratch = b.temp[:nth * floats].view(np.float32).reshape(nth, floats // 4)
    slots = b.temp[nth * floats:nth * (floats + ints)].view(np.int64).reshape(nth, ints // 8)
    order, first = slots[:, :node.ne[1] * node.ne[2]], slots[:, node.ne[1] * node.ne[2]:_grouped_ints(node)]
    code = CODES.get(node.src[0].type)
    if code is None:
        return launch(mul_mat_id_grouped_float, (d, a, x, ids, scratch, _panel_rows(node), order, first, bad), nth)
    return launch(mul_mat_id_grouped, (code, d, a, x, ids, scratch, _panel_rows(node), order, first, bad), nth,
                  constants=(0,))


@register("mul_mat_id", temp_size=temp_size, impls=("q8", "dot", "grouped"), choose=choose,
          name=lambda node, impl: f"{impl}_id_{node.src[0].type.name}")
def bind_mul_mat_id(b: BoundNode):
    d, a, x, ids = b.dst, b.srcs[0], b.srcs[1], b.srcs[2]
    node, k = b.node, b.node.src[0].ne[0]
    nth = max(1, min(b.n_threads, d.shape[3], 2 * d.size * k // (1 << 17)))
    rows, xq, xds = _views(b.temp, nth, node, b.impl, k)
    bad = np.zeros(b.n_threads, np.int64)
    code = CODES.get(node.src[0].type)
    if b.impl == "grouped":
        run = _bind_grouped(b, d, a, x, ids, bad)
    elif code is None:
        run = launch(mul_mat_id_float, (d, a, x, ids, rows, bad), nth)
    elif b.impl == "q8":
        run = launch(mul_mat_id_q8, (code, d, a, x, ids, rows, xq, xds, bad), nth, constants=(0,))
    else:
        run = launch(mul_mat_id_dot, (code, d, a, x, ids, rows, bad), nth, constants=(0,))
    name, experts = node.name or "mul_mat_id", node.src[0].ne[2]

    def checked():
        run()
        if bad[0]:
            raise RowIndexError(f"mul_mat_id '{name}': {int(bad[0])} expert id(s) in ids outside [0, {experts}) (as "
                                f"ne={node.src[0].ne}); first: {int(ids[(ids < 0) | (ids >= experts)][0])}")
    return checked
