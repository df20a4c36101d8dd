"""rope (ggml_rope_ext): normal and NEOX pairs, frequency factors, YaRN; F32, F16, BF16, any strides.

Rows (i1, i2, i3) are split over workers in blocks; a worker computes the cos/sin of a token's pairs once (in
float64 from the exact angle, then float32) and rotates every head of that token with them. It may run in place:
each pair is read before it is written.
"""
import math

import numpy as np

from ....ops.rope import yarn_corr_dims, yarn_mscale
from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index
from .fp16 import load, store


@kernel
def rope_rows(d, a, pos, ff, inv_freq, neox, freq_scale, ext_factor, mscale, low, high, ith, nth):
    """d = rope(a) with d.ne = a.ne = (ne0, heads, tokens, seqs); pos (tokens,) int32, ff None or the frequency
    factors, inv_freq[i] = freq_base^(-2i / n_dims) for the n_dims / 2 pairs."""
    ne3, ne2, ne1, ne0 = d.shape
    half = inv_freq.shape[0]
    dt = d.dtype
    cs = np.empty(half, np.float32)
    sn = np.empty(half, np.float32)
    last = -1
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        if i2 != last:
            last = i2
            for i in range(half):
                extrap = np.float64(pos[i2]) * inv_freq[i]
                if ff is not None:
                    extrap /= ff[i]
                theta = extrap * freq_scale
                if ext_factor != 0:
                    mix = ext_factor * (1.0 - min(1.0, max(0.0, (i - low) / max(0.001, high - low))))
                    theta = theta * (1.0 - mix) + extrap * mix
                cs[i] = math.cos(theta) * mscale
                sn[i] = math.sin(theta) * mscale
        arow, drow = a[i3, i2, i1], d[i3, i2, i1]
        for i in range(half):
            k0, k1 = (i, i + half) if neox else (2 * i, 2 * i + 1)
            x0, x1 = load(arow[k0]), load(arow[k1])
            drow[k0] = store(x0 * cs[i] - x1 * sn[i], dt)
            drow[k1] = store(x0 * sn[i] + x1 * cs[i], dt)
        for i0 in range(2 * half, ne0):
            drow[i0] = arow[i0]


@register("rope")
def bind_rope(b: BoundNode):
    p = b.node.op_params
    n = p["n_dims"]
    inv_freq = float(p["freq_base"]) ** (-2.0 * np.arange(n // 2) / n)
    ff = b.srcs[2][0, 0, 0] if len(b.srcs) > 2 else None
    low, high = yarn_corr_dims(p)
    args = (b.dst, b.srcs[0], b.srcs[1][0, 0, 0], ff, inv_freq, p["mode"] == 2, p["freq_scale"], p["ext_factor"],
            yarn_mscale(p), low, high)
    return launch(rope_rows, args, b.threads_for(b.dst.size))
