"""Rope reference: each rotated pair as a complex number times mscale * e^(i theta), in float64, from the formulas
(theta_i = p * base^(-2i/n_dims) / c_i, scaled by freq_scale, YaRN's linear ramp from extrapolation at pair `lo` to
interpolation at pair `hi`, the correction dims)."""
from __future__ import annotations

import math

import numpy as np

from .common import reference


def rope_angles(pos, n_dims, freq_base, freq_scale, ext_factor=0.0, attn_factor=1.0, n_ctx_orig=0, beta_fast=32.0,
                beta_slow=1.0, factors=None):
    """(theta, mscale): theta of shape (len(pos), n_dims / 2), the angle of each token's pairs, and the magnitude."""
    i = np.arange(n_dims // 2, dtype=np.float64)
    extrap = np.outer(np.asarray(pos, np.float64), np.exp(-2.0 * i / n_dims * math.log(freq_base)))
    if factors is not None:
        extrap = extrap / np.asarray(factors, np.float64)[: n_dims // 2]
    theta, mscale = extrap * freq_scale, attn_factor
    if ext_factor != 0:
        # the pair index at which a wavelength fits `rotations` times into the original context
        def pair_at(rotations):
            return n_dims / 2 * math.log(n_ctx_orig / (2 * math.pi * rotations)) / math.log(freq_base)
        lo, hi = max(0.0, math.floor(pair_at(beta_fast))), min(n_dims - 1.0, math.ceil(pair_at(beta_slow)))
        extrapolated = ext_factor * (1.0 - np.clip((i - lo) / max(hi - lo, 0.001), 0.0, 1.0))
        theta = theta + (extrap - theta) * extrapolated
        mscale = attn_factor * (1.0 + 0.1 * math.log(1.0 / freq_scale))
    return theta, mscale


@reference("rope")
def _rope(node, s):
    p = node.op_params
    x, n = s[0].copy(), p["n_dims"]
    theta, mscale = rope_angles(s[1].reshape(-1), n, p["freq_base"], p["freq_scale"], p["ext_factor"],
                                p["attn_factor"], p["n_ctx_orig"], p["beta_fast"], p["beta_slow"],
                                None if len(s) < 3 else s[2].reshape(-1))
    rot = mscale * np.exp(1j * theta)[None, :, None, :]          # (1, n_tokens, 1, n_dims / 2)
    if p["mode"] == 2:
        re, im = slice(0, n // 2), slice(n // 2, n)
    else:
        re, im = slice(0, n, 2), slice(1, n, 2)
    z = (x[..., re] + 1j * x[..., im]) * rot
    x[..., re], x[..., im] = z.real, z.imag
    return x
