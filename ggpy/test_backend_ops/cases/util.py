"""Building blocks for op cases: leafs in F32/F16, non-contiguous views of the same logical shape, and random
blocks of the quantized types."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...types import BF16, F16, F32, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q6_K

TYPES = (F32, F16, BF16)


def leaf(ctx, type_, ne):
    return ctx.new_tensor(type_, ne).set_input()


def layout(ctx, type_, ne, how: str = "cont"):
    """A tensor of logical shape `ne` laid out as `how`:

    cont      a contiguous leaf;
    permuted  a transposed view of a leaf stored with dimensions 0 and 1 swapped (ne[0] is not contiguous);
    padded    a view of the first ne[0] columns of a wider leaf (rows have gaps);
    permuted3 a view with dimensions 1 and 2 swapped (rows contiguous, rows out of order).
    """
    ne = tuple(ne) + (1,) * (4 - len(ne))
    if how == "cont":
        return leaf(ctx, type_, ne)
    if how == "permuted":
        base = leaf(ctx, type_, (ne[1], ne[0], ne[2], ne[3]))
        return ops.transpose(base)
    if how == "padded":
        base = leaf(ctx, type_, (ne[0] + 3, ne[1], ne[2], ne[3]))
        return ops.view_4d(base, ne[0], ne[1], ne[2], ne[3], base.nb[1], base.nb[2], base.nb[3], 0)
    if how == "permuted3":
        base = leaf(ctx, type_, (ne[0], ne[2], ne[1], ne[3]))
        return ops.permute(base, 0, 2, 1, 3)
    raise ValueError(f"unknown layout {how!r}")


LAYOUTS = ("cont", "permuted", "padded", "permuted3")


def uniform(lo: float, hi: float):
    """A fill function giving uniform values in [lo, hi) to float leafs."""
    def fill(rng: np.random.Generator, t):
        if t.type in TYPES:
            return rng.uniform(lo, hi, size=tuple(reversed(t.ne)))
        return None
    return fill


def random_blocks(rng: np.random.Generator, type_, ne) -> np.ndarray:
    """Random rows of `type_`'s blocks (uint8, shape (ne3, ne2, ne1, bytes per row)): uniform F32 weights in [-1, 1)
    quantized by gguf.quants where it quantizes the type; else random bytes whose f16 scale fields are set to finite
    values in [2^-10, 2^-9) (SCALES_AT: where they lie)."""
    import gguf

    qtype = gguf.GGMLQuantizationType(type_.ggml_id)
    shape = tuple(reversed(ne))
    try:
        return gguf.quants.quantize(rng.uniform(-1, 1, shape).astype(np.float32), qtype)
    except NotImplementedError:
        raw = rng.integers(0, 256, shape[:3] + (type_.row_bytes(ne[0]),), dtype=np.uint8)
    blocks = raw.reshape(-1, type_.size)
    at = SCALES_AT.get(type_, 0)
    n = 1 if type_ in (Q6_K, Q3_K, IQ4_NL, IQ4_XS) else 2
    blocks[:, at:at + 2 * n] = rng.uniform(2 ** -10, 2 ** -9, (len(blocks), n)).astype(np.float16).view(np.uint8)
    return raw


SCALES_AT = {Q6_K: 208, Q2_K: 80, Q3_K: 108}
"""Byte offset of a block's f16 scale (d; d and dmin for the K-quants with mins) where it is not 0."""
