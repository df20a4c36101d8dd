"""Rotary position embedding (ggml_rope_ext, ggml_rope): normal and NEOX pairing, frequency base and scale,
optional frequency factors, YaRN's ramp and magnitude."""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError, TypeMismatchError
from ..types import F32, I32
from ._common import check_contiguous, check_float, check_int, check_tensor, new_node

MODES = {0: "normal", 2: "neox"}
"""ggml's rope modes ggpy runs: 0 rotates pairs (2i, 2i+1) of each row, 2 (GGML_ROPE_TYPE_NEOX) (i, i + n_dims/2)."""


def rope_ext(a, b, c, n_dims: int, mode: int, n_ctx_orig: int, freq_base: float, freq_scale: float,
             ext_factor: float, attn_factor: float, beta_fast: float, beta_slow: float):
    """ggml_rope_ext: rotate the first n_dims values of each row of a by its token's position. ne = a.ne.

    a.ne = (head_dim, n_head, n_tokens, n_seq), float; b: I32 positions, ne = (n_tokens,); c: None or F32
    frequency factors, contiguous, ne[0] >= n_dims / 2. Pair i (of n_dims / 2) turns by theta_i = p * freq_base^(-2i
    / n_dims) / c_i, scaled by freq_scale and, with ext_factor != 0, mixed back towards the unscaled angle by YaRN's
    ramp over the pairs between ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow); both
    outputs of a pair are multiplied by attn_factor (times 1 + 0.1 ln(1 / freq_scale) with YaRN). Values past n_dims
    are copied.
    """
    check_float("rope_ext", a)
    check_tensor("rope_ext", b, "b")
    if b.type != I32 or b.ne != (a.ne[2], 1, 1, 1):
        raise (TypeMismatchError if b.type != I32 else ShapeError)(
            f"rope_ext: b must be I32 positions of ne=({a.ne[2]},) (one per a.ne[2] of a ne={a.ne}); got "
            f"{b.type.name} ne={b.ne}")
    n_dims = check_int("rope_ext", "n_dims", n_dims, 2, f"a ne={a.ne}")
    if n_dims % 2 or n_dims > a.ne[0]:
        raise ShapeError(f"rope_ext: n_dims={n_dims} must be even and at most a.ne[0]={a.ne[0]} (a ne={a.ne})")
    if c is not None:
        check_tensor("rope_ext", c, "c")
        if c.type != F32 or c.ne[0] < n_dims // 2:
            raise (TypeMismatchError if c.type != F32 else ShapeError)(
                f"rope_ext: c (frequency factors) must be F32 with ne[0] >= n_dims / 2 = {n_dims // 2}; got "
                f"{c.type.name} ne={c.ne}")
        check_contiguous("rope_ext", c, "c")
    if isinstance(mode, bool) or mode not in tuple(MODES):
        raise ShapeError(f"rope_ext: mode={mode!r}; expected 0 (normal) or 2 (NEOX)")
    n_ctx_orig = check_int("rope_ext", "n_ctx_orig", n_ctx_orig, 0)
    floats = {"freq_base": freq_base, "freq_scale": freq_scale, "ext_factor": ext_factor,
              "attn_factor": attn_factor, "beta_fast": beta_fast, "beta_slow": beta_slow}
    for name, v in floats.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeMismatchError(f"rope_ext: {name} must be a number, got {type(v).__name__} {v!r}")
        if not math.isfinite(v):
            raise ShapeError(f"rope_ext: {name} must be finite, got {v!r}")
    if freq_base <= 0 or freq_scale <= 0:
        raise ShapeError(f"rope_ext: freq_base={freq_base} and freq_scale={freq_scale} must be > 0")
    if ext_factor != 0 and (n_ctx_orig < 1 or freq_base == 1 or beta_fast <= 0 or beta_slow <= 0):
        raise ShapeError(f"rope_ext: YaRN (ext_factor={ext_factor}) needs n_ctx_orig >= 1 (got {n_ctx_orig}), "
                         f"freq_base != 1 (got {freq_base}) and beta_fast, beta_slow > 0 (got {beta_fast}, {beta_slow})")
    params = {"n_dims": n_dims, "mode": int(mode), "n_ctx_orig": n_ctx_orig} | {k: float(v) for k, v in floats.items()}
    return new_node("rope", a.type, a.ne, [a, b] if c is None else [a, b, c], params)


def rope(a, b, n_dims: int, mode: int):
    """ggml_rope: rope_ext with no frequency factors, freq_base 10000, freq_scale 1, no YaRN. ne = a.ne."""
    return rope_ext(a, b, None, n_dims, mode, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0)


def yarn_corr_dims(p: dict) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims for a rope node's op_params: the pair indices between which YaRN's ramp runs
    (unused, (0, 0), without YaRN)."""
    if p["ext_factor"] == 0:
        return 0.0, 0.0

    def corr_dim(n_rot):
        return p["n_dims"] * math.log(p["n_ctx_orig"] / (n_rot * 2 * math.pi)) / (2 * math.log(p["freq_base"]))
    return max(0.0, math.floor(corr_dim(p["beta_fast"]))), min(p["n_dims"] - 1.0, math.ceil(corr_dim(p["beta_slow"])))


def yarn_mscale(p: dict) -> float:
    """The factor both outputs of a pair get: attn_factor, times 1 + 0.1 ln(1 / freq_scale) with YaRN."""
    return p["attn_factor"] * (1 + 0.1 * math.log(1 / p["freq_scale"]) if p["ext_factor"] != 0 else 1.0)
