"""rope (ggml_rope_ext): normal and NEOX pairs, frequency factors, YaRN; F32, F16, BF16, any strides.

Rows (i1, i2, i3) are split over workers in blocks; a worker computes the cos/sin of a token's pairs once (in
float64 from the exact angle, then float32) and rotates every head of that token with them. It may run in place:
each pair is read before it is written. The rope_set_rows pattern (ggpy/graph/fusion.py) writes the rotated rows
straight into a destination's rows (a KV cache's), in its type (float, or quantized head by head as set_rows would).
"""
import math

import numpy as np

from ....errors import RowIndexError
from ....ops.rope import yarn_corr_dims, yarn_mscale
from ....types import BF16, F16, F32
from ...kernel import Fused
from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index, scalar
from .fp16 import load, store
from .half import cast
from .quants import QUANTIZE, QUANTIZE_CODES


@scalar
def _angles(cs, sn, p, ff, inv_freq, freq_scale, ext_factor, mscale, low, high):
    """cs[i], sn[i] = cos, sin of pair i's angle at position p (in float64 from the exact angle, then float32)."""
    for i in range(inv_freq.shape[0]):
        extrap = np.float64(p) * inv_freq[i]
        if ff is not None:
            extrap /= ff[i]
        theta = extrap * freq_scale
        if ext_factor != 0:
            mix = ext_factor * (1.0 - min(1.0, max(0.0, (i - low) / max(0.001, high - low))))
            theta = theta * (1.0 - mix) + extrap * mix
        cs[i] = math.cos(theta) * mscale
        sn[i] = math.sin(theta) * mscale


@scalar
def _rotate(drow, arow, cs, sn, neox):
    """drow = arow rotated pair by pair (the pairs past 2 * len(cs) copied), in drow's type."""
    half = cs.shape[0]
    dt = drow.dtype
    for i in range(half):
        k0, k1 = (i, i + half) if neox else (2 * i, 2 * i + 1)
        x0, x1 = load(arow[k0]), load(arow[k1])
        drow[k0] = store(x0 * cs[i] - x1 * sn[i], dt)
        drow[k1] = store(x0 * sn[i] + x1 * cs[i], dt)
    for i0 in range(2 * half, arow.shape[0]):
        drow[i0] = store(load(arow[i0]), dt)


@kernel
def rope_rows(d, a, pos, ff, inv_freq, neox, freq_scale, ext_factor, mscale, low, high, ith, nth):
    """d = rope(a) with d.ne = a.ne = (ne0, heads, tokens, seqs); pos (tokens,) int32, ff None or the frequency
    factors, inv_freq[i] = freq_base^(-2i / n_dims) for the n_dims / 2 pairs."""
    ne3, ne2, ne1, ne0 = d.shape
    half = inv_freq.shape[0]
    cs = np.empty(half, np.float32)
    sn = np.empty(half, np.float32)
    last = -1
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        if i2 != last:
            last = i2
            _angles(cs, sn, pos[i2], ff, inv_freq, freq_scale, ext_factor, mscale, low, high)
        _rotate(d[i3, i2, i1], a[i3, i2, i1], cs, sn, neox)


@kernel
def rope_set_rows_rows(d, a, pos, idx, ff, inv_freq, neox, freq_scale, ext_factor, mscale, low, high, bad, ith, nth):
    """d[idx[i2], i1 * ne0:(i1 + 1) * ne0] = rope(a)[0, i2, i1] in d's type: a.ne = (ne0, heads, tokens, 1), d the
    destination's rows (rows, heads * ne0), idx (tokens,) int32; rows of an index outside [0, rows) are skipped,
    bad[ith] counts this worker's. A head is rotated in float32 and then converted in one contiguous (vectorised)
    loop."""
    ne2, ne1, ne0 = a.shape[1:]
    half = inv_freq.shape[0]
    dt = d.dtype
    cs = np.empty(half, np.float32)
    sn = np.empty(half, np.float32)
    x = np.empty(ne0, np.float32)
    last, n_bad = -1, 0
    r0, r1 = block(ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i2, i1 = r // ne1, r % ne1
        j = idx[i2]
        if j < 0 or j >= d.shape[0]:
            n_bad += 1
            continue
        if i2 != last:
            last = i2
            _angles(cs, sn, pos[i2], ff, inv_freq, freq_scale, ext_factor, mscale, low, high)
        _rotate(x, a[0, i2, i1], cs, sn, neox)
        drow = d[j, i1 * ne0:(i1 + 1) * ne0]
        for i0 in range(ne0):
            drow[i0] = cast(x[i0], dt)
    bad[ith] = n_bad


@kernel
def rope_set_rows_quantize(code, d, a, pos, idx, ff, inv_freq, neox, freq_scale, ext_factor, mscale, low, high, bad,
                           ith, nth):
    """rope_set_rows_rows into a quantized d (rows of block bytes, each head's ne0 whole blocks): each rotated head
    (float32) quantized into its place by QUANTIZE[code], the blocks set_rows would write."""
    f = QUANTIZE[code]
    ne2, ne1, ne0 = a.shape[1:]
    hb = d.shape[1] // ne1
    half = inv_freq.shape[0]
    cs = np.empty(half, np.float32)
    sn = np.empty(half, np.float32)
    x = np.empty(ne0, np.float32)
    last, n_bad = -1, 0
    r0, r1 = block(ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i2, i1 = r // ne1, r % ne1
        j = idx[i2]
        if j < 0 or j >= d.shape[0]:
            n_bad += 1
            continue
        if i2 != last:
            last = i2
            _angles(cs, sn, pos[i2], ff, inv_freq, freq_scale, ext_factor, mscale, low, high)
        _rotate(x, a[0, i2, i1], cs, sn, neox)
        f(d[j, i1 * hb:(i1 + 1) * hb], x)
    bad[ith] = n_bad


def _rope_args(p, srcs) -> tuple:
    """The angle arguments of the rope kernels after (d, a): pos, [idx], ff, inv_freq, neox, ... (idx left out)."""
    n = p["n_dims"]
    inv_freq = float(p["freq_base"]) ** (-2.0 * np.arange(n // 2) / n)
    ff = srcs[2][0, 0, 0] if len(srcs) > 2 and srcs[2] is not None else None
    low, high = yarn_corr_dims(p)
    return ff, inv_freq, p["mode"] == 2, p["freq_scale"], p["ext_factor"], yarn_mscale(p), low, high


def _run_rope_set_rows(b: BoundNode, fused):
    """The rope of b (its node and sources; b.dst the destination's memory) written into the destination's rows."""
    node, last = b.node, fused.last
    d = b.dst.reshape(last.ne[1], -1)
    idx = fused.idx.buffer.kernel_view(fused.idx).reshape(-1)
    nth = b.threads_for(b.srcs[0].size)
    bad = np.zeros(nth, np.int64)
    args = (d, b.srcs[0], b.srcs[1][0, 0, 0], idx) + _rope_args(node.op_params, b.srcs) + (bad,)
    if last.type.quantized:
        scatter = launch(rope_set_rows_quantize, (QUANTIZE_CODES[last.type],) + args, nth, constants=(0,))
    else:
        scatter = launch(rope_set_rows_rows, args, nth)
    name, ne, counts = last.name or "set_rows", last.ne, memoryview(bad)

    def run():
        scatter()
        if any(counts):             # a memoryview's any: a tenth of ndarray.any's cost, once a token
            raise RowIndexError(f"set_rows '{name}': {int(bad.sum())} row index(es) outside [0, {ne[1]}), the rows "
                                f"of a ne={ne}; first: {int(idx[(idx < 0) | (idx >= ne[1])][0])}")
    return run


def _takes_set_rows(f) -> bool:
    """A destination of one contiguous matrix (its rows: the tokens' heads), of a float type or one set_rows
    quantizes into whose blocks tile each head."""
    t = f.dst.type
    fits = t in (F32, F16, BF16) or (t in QUANTIZE_CODES and f.head.ne[0] % t.block == 0)
    return fits and f.dst.is_contiguous() and f.dst.ne[2] == f.dst.ne[3] == 1


@register("rope", fuses={"rope_set_rows": Fused(_run_rope_set_rows, accepts=_takes_set_rows)})
def bind_rope(b: BoundNode):
    args = (b.dst, b.srcs[0], b.srcs[1][0, 0, 0]) + _rope_args(b.node.op_params, b.srcs)
    return launch(rope_rows, args, b.threads_for(b.dst.size))
