"""Layout kernels: copies (dup, cont, cpy), concat, pad, repeat, get_rows, set_rows (into float or Q8_0 rows).

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits, a quantized
tensor as the bytes of its rows (ne0 / block * size). Elements go through `convert`, which keeps them bit for bit
when source and destination types match (I32 stays exact, F16 keeps its bits) and converts through float32
otherwise (F32 <-> F16). Copies into a quantized type quantize row by row, get_rows of one dequantizes (quants.py).
"""

import numpy as np
from ....errors import RowIndexError
from ..registry import BoundNode, register
from .common import block, flat, kernel, launch, row_index, scalar
from .convert import convert, copy_transposed
from .fp16 import store
from .half import cast
from .quants import CODES, DEQUANTIZE, QUANTIZE, QUANTIZE_CODES


# -- dup, cont, cpy ------------------------------------------------------------------------------------------

@kernel
def copy_flat(d, a, ith, nth):
    """d[i] = a[i] on flat contiguous arrays of one size."""
    i0, i1 = block(d.size, ith, nth)
    d, a = d[i0:i1], a[i0:i1]          # slices: indices provably >= 0, so the loop vectorises
    for i in range(d.size):
        d[i] = convert(a[i], d.dtype)


@scalar
def _unravel(i, shape):
    """The 4-d index (i3, i2, i1, i0) of flat position `i` in ne order (i0 fastest)."""
    ne3, ne2, ne1, ne0 = shape
    return i // (ne2 * ne1 * ne0), (i // (ne1 * ne0)) % ne2, (i // ne0) % ne1, i % ne0


@scalar
def _next_row(i1, i2, i3, ne1, ne2):
    """(i1, i2, i3) of the row after row (i3, i2, i1) in ne order."""
    i1 += 1
    if i1 == ne1:
        i1 = 0
        i2 += 1
        if i2 == ne2:
            i2 = 0
            i3 += 1
    return i1, i2, i3


@kernel
def copy_nd(d, a, ith, nth):
    """Element i of `a` to element i of `d`, both taken in ne order (i0 fastest); shapes may differ, sizes match.

    Works in runs that stay inside one row of `a` and one row of `d`.
    """
    s, e = block(a.size, ith, nth)
    if s >= e:
        return
    a3, a2, a1, a0 = _unravel(s, a.shape)
    d3, d2, d1, d0 = _unravel(s, d.shape)
    na3, na2, na1, na0 = a.shape
    nd3, nd2, nd1, nd0 = d.shape
    i = s
    while i < e:
        arow = a[a3, a2, a1]
        drow = d[d3, d2, d1]
        n = min(na0 - a0, nd0 - d0, e - i)
        for k in range(n):
            drow[d0 + k] = convert(arow[a0 + k], drow.dtype)
        i += n
        a0 += n
        d0 += n
        if a0 == na0:
            a0 = 0
            a1, a2, a3 = _next_row(a1, a2, a3, na1, na2)
        if d0 == nd0:
            d0 = 0
            d1, d2, d3 = _next_row(d1, d2, d3, nd1, nd2)


@kernel
def quantize_rows(code, d, x, ith, nth):
    """d[i3, i2, i1] (the bytes of a row of blocks) = row (i3, i2, i1) of x (float32, same ne) quantized."""
    f = QUANTIZE[code]
    ne3, ne2, ne1 = d.shape[:3]
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        f(d[i3, i2, i1], x[i3, i2, i1])


def _copy_refusal(node) -> str | None:
    """A copy into a quantized type reads its F32 source row by row: one of the destination's shape, or contiguous."""
    if not node.type.quantized or node.src[0].ne == node.ne or node.src[0].is_contiguous():
        return None
    return f"{node.op} into {node.type.name} reads a source of its shape or a contiguous one"


@register("dup", "cont", "cpy", "cast", refusal=_copy_refusal)
def bind_copy(b: BoundNode):
    d, x = b.dst, b.srcs[0]
    if b.node.type.quantized:
        x = x.reshape(tuple(reversed(b.node.ne)))
        return launch(quantize_rows, (QUANTIZE_CODES[b.node.type], d, x), b.threads_for(x.size), constants=(0,))
    nth = b.threads_for(d.size)
    if flat(d) is not None and flat(x) is not None:
        return launch(copy_flat, (flat(d), flat(x)), nth)
    axis = _unit_axis(x)
    if d.shape == x.shape and d.flags.c_contiguous and axis is not None and d.shape[3] > 1:
        dd, xx = np.moveaxis(d, axis, 2), np.moveaxis(x, axis, 2)
        return launch(copy_transposed, (dd, xx), nth)
    return launch(copy_nd, (d, x), nth)


def _unit_axis(x: np.ndarray):
    """The outer axis (0-2) along which x's elements are adjacent when its inner axis is not, else None."""
    if x.shape[3] == 1 or x.strides[3] == x.itemsize:
        return None
    for axis in (2, 1, 0):
        if x.shape[axis] > 1 and x.strides[axis] == x.itemsize:
            return axis
    return None


# -- concat, pad, repeat -------------------------------------------------------------------------------------

@kernel
def concat_rows(dim, d, a, b, ith, nth):
    """d = a and b joined along ne dimension `dim` (0-3), row by row."""
    ne3, ne2, ne1, ne0 = d.shape
    na3, na2, na1, na0 = a.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        if dim == 0:
            arow = a[i3, i2, i1]
            brow = b[i3, i2, i1]
            for i0 in range(na0):
                drow[i0] = convert(arow[i0], drow.dtype)
            for i0 in range(ne0 - na0):
                drow[na0 + i0] = convert(brow[i0], drow.dtype)
            continue
        if dim == 1:
            srow = a[i3, i2, i1] if i1 < na1 else b[i3, i2, i1 - na1]
        elif dim == 2:
            srow = a[i3, i2, i1] if i2 < na2 else b[i3, i2 - na2, i1]
        else:
            srow = a[i3, i2, i1] if i3 < na3 else b[i3 - na3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = convert(srow[i0], drow.dtype)


@register("concat")
def bind_concat(b: BoundNode):
    args = (b.node.op_params["dim"], b.dst, b.srcs[0], b.srcs[1])
    return launch(concat_rows, args, b.threads_for(b.dst.size))


@kernel
def pad_rows(lp0, lp1, lp2, lp3, d, a, ith, nth):
    """d = a shifted by the left pads (lp0..lp3) with zeros around it, row by row."""
    ne3, ne2, ne1, ne0 = d.shape
    na3, na2, na1, na0 = a.shape
    zero = store(np.float32(0.0), d.dtype)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        j3, j2, j1 = i3 - lp3, i2 - lp2, i1 - lp1
        if 0 <= j3 < na3 and 0 <= j2 < na2 and 0 <= j1 < na1:
            arow = a[j3, j2, j1]
            for i0 in range(lp0):
                drow[i0] = zero
            for i0 in range(na0):
                drow[lp0 + i0] = convert(arow[i0], drow.dtype)
            for i0 in range(lp0 + na0, ne0):
                drow[i0] = zero
        else:
            for i0 in range(ne0):
                drow[i0] = zero


@register("pad")
def bind_pad(b: BoundNode):
    args = (*b.node.op_params["lp"], b.dst, b.srcs[0])
    return launch(pad_rows, args, b.threads_for(b.dst.size))


@kernel
def repeat_rows(d, a, ith, nth):
    """d = a tiled in every dimension (each d dimension a multiple of a's), row by row."""
    if d.size == 0:
        return
    ne3, ne2, ne1, ne0 = d.shape
    na3, na2, na1, na0 = a.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        arow = a[i3 % na3, i2 % na2, i1 % na1]
        for t in range(0, ne0, na0):
            for i0 in range(na0):
                drow[t + i0] = convert(arow[i0], drow.dtype)


@register("repeat")
def bind_repeat(b: BoundNode):
    return launch(repeat_rows, (b.dst, b.srcs[0]), b.threads_for(b.dst.size))


# -- get_rows ------------------------------------------------------------------------------------------------

@kernel
def get_rows_rows(d, a, idx, bad, ith, nth):
    """d[i3, i2, i1] = a[i3, i2, idx[0, i3, i2, i1]] for d (A3, A2, n, K), a (A3, A2, R, K), idx (1, A3, A2, n).

    Rows whose index is outside [0, R) are zeroed; bad[ith] counts this worker's.
    """
    ne3, ne2, ne1, ne0 = d.shape
    nrows = a.shape[2]
    zero = store(np.float32(0.0), d.dtype)
    n_bad = 0
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        j = idx[0, i3, i2, i1]
        if j < 0 or j >= nrows:
            n_bad += 1
            for i0 in range(ne0):
                drow[i0] = zero
            continue
        arow = a[i3, i2, j]
        for i0 in range(ne0):
            drow[i0] = convert(arow[i0], drow.dtype)
    bad[ith] = n_bad


@kernel
def get_rows_dequantize(code, d, a, idx, bad, ith, nth):
    """get_rows_rows of a quantized a (rows of block bytes), each row dequantized into d (float32)."""
    f = DEQUANTIZE[code]
    ne3, ne2, ne1, ne0 = d.shape
    nrows = a.shape[2]
    n_bad = 0
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        j = idx[0, i3, i2, i1]
        if j < 0 or j >= nrows:
            n_bad += 1
            d[i3, i2, i1] = 0.0
        else:
            f(d[i3, i2, i1], a[i3, i2, j])
    bad[ith] = n_bad


@register("get_rows")
def bind_get_rows(b: BoundNode):
    d, a, idx = b.dst, b.srcs[0], b.srcs[1]
    nth = b.threads_for(d.size)
    name = b.node.name or "get_rows"
    ne, rows = b.node.src[0].ne, b.node.src[0].ne[1]
    code = CODES.get(b.node.src[0].type)
    bad = np.zeros(nth, np.int64)           # rows with an index out of range, per worker
    if code is None:
        gather = launch(get_rows_rows, (d, a, idx, bad), nth)
    else:
        gather = launch(get_rows_dequantize, (code, d, a, idx, bad), nth, constants=(0,))

    def run():
        gather()
        if bad.any():
            pos = tuple(np.argwhere((idx < 0) | (idx >= rows))[0])
            raise RowIndexError(f"get_rows '{name}': {int(bad.sum())} row index(es) in b outside [0, {rows}), the rows "
                                f"of a ne={ne}; first: {int(idx[pos])} at b[{pos[3]}, {pos[2]}, {pos[1]}] (ne order)")
    return run


# -- set_rows ------------------------------------------------------------------------------------------------

@kernel
def set_rows_rows(d, b, idx, bad, ith, nth):
    """d[i3, i2, idx[0, i3 % C2, i2 % C1, i1]] = b[i3, i2, i1] for b (A3, A2, n, K), d (A3, A2, R, K), idx (1, C2,
    C1, n); workers split b's rows. Rows whose index is outside [0, R) are skipped; bad[ith] counts this worker's."""
    ne3, ne2, ne1, ne0 = b.shape
    nrows = d.shape[2]
    n_bad = 0
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        j = idx[0, i3 % idx.shape[1], i2 % idx.shape[2], i1]
        if j < 0 or j >= nrows:
            n_bad += 1
            continue
        drow, brow = d[i3, i2, j], b[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = cast(brow[i0], drow.dtype)
    bad[ith] = n_bad


@kernel
def set_rows_quantize(code, d, b, idx, bad, ith, nth):
    """set_rows_rows into a quantized d (rows of block bytes): each row of b (float32) quantized into its place."""
    f = QUANTIZE[code]
    ne3, ne2, ne1 = b.shape[:3]
    nrows = d.shape[2]
    n_bad = 0
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        j = idx[0, i3 % idx.shape[1], i2 % idx.shape[2], i1]
        if j < 0 or j >= nrows:
            n_bad += 1
            continue
        f(d[i3, i2, j], b[i3, i2, i1])
    bad[ith] = n_bad


@register("set_rows")
def bind_set_rows(b: BoundNode):
    d, rows, idx = b.dst, b.srcs[0], b.srcs[1]
    nth = b.threads_for(rows.size)
    name, ne = b.node.name or "set_rows", b.node.ne
    bad = np.zeros(nth, np.int64)           # rows with an index out of range, per worker
    counts = memoryview(bad)
    if b.node.type.quantized:
        scatter = launch(set_rows_quantize, (QUANTIZE_CODES[b.node.type], d, rows, idx, bad), nth, constants=(0,))
    else:
        scatter = launch(set_rows_rows, (d, rows, idx, bad), nth)

    def run():
        scatter()
        if any(counts):             # a memoryview's any: a tenth of ndarray.any's cost, once a token
            raise RowIndexError(f"set_rows '{name}': {int(bad.sum())} row index(es) in c outside [0, {ne[1]}), the "
                                f"rows of a ne={ne}; first: {int(idx[(idx < 0) | (idx >= ne[1])].flat[0])}")
    return run
