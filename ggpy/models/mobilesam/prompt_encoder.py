"""MobileSAM's prompt encoder (SAM's PromptEncoder) as ggpy graph builders, in the f(model, x) style.

Sparse prompts (points and box corners) become tokens ne = (D, N): the random Fourier positional encoding of
each point plus the learned embedding of its kind. Dense prompts become an image-sized embedding added to the
image embedding: the embedding of a low-resolution mask (mask_downscaling), or the learned no_mask_embed
broadcast over the grid. Tokens and embeddings are channels-contiguous, ne = (D, W, H), as in encoder.py.

Weights come from a GGUF written by convert.py under their state-dict names; in an F16
file the `.weight` tables (point embeddings, no_mask_embed) are F16 and reach F32 through get_rows or add.
"""
from __future__ import annotations

import math

import numpy as np

import ggpy

from .encoder import layer_norm, pointwise

PE = "prompt_encoder"
LN2D_EPS = 1e-6

# Index of each sparse token's learned embedding in kind_table(): SAM's point labels -1 (padding), 0, 1 are
# kinds 0, 1, 2 (label + 1); a box gives its top-left and bottom-right corners.
KIND_NOT_A_POINT, KIND_NEGATIVE, KIND_POSITIVE, KIND_BOX_TOP_LEFT, KIND_BOX_BOTTOM_RIGHT = range(5)


def fourier_features(m, coords):
    """SAM's PositionEmbeddingRandom of points normalised to [0, 1]²: coords ne = (2, N) holding (x, y) ->
    ne = (D, N) = [sin(p), cos(p)] with p = 2π (2c - 1) @ G, G ne = (D/2, 2) the Gaussian matrix."""
    g = m.get(f"{PE}.pe_layer.positional_encoding_gaussian_matrix")
    c = ggpy.scale(coords, 2.0, -1.0)
    p = ggpy.scale(ggpy.mul_mat(ggpy.cont(ggpy.transpose(g)), c), 2.0 * math.pi)
    return ggpy.concat(ggpy.sin(p), ggpy.cos(p), 0)


def grid_coords(size: int) -> np.ndarray:
    """float32 (size * size, 2): the normalised centres ((x + 0.5) / size, (y + 0.5) / size) of a size x size
    grid, row by row (y outer): the input of fourier_features for SAM's dense positional encoding."""
    c = (np.arange(size, dtype=np.float32) + np.float32(0.5)) / np.float32(size)
    x, y = np.meshgrid(c, c)
    return np.stack([x.ravel(), y.ravel()], axis=1)


def dense_positional_encoding(m, grid):
    """get_dense_pe(): grid ne = (2, E * E) from grid_coords(E) -> tokens ne = (D, E, E)."""
    e = math.isqrt(grid.ne[1])
    pe = fourier_features(m, grid)
    return ggpy.reshape_3d(pe, pe.ne[0], e, e)


def kind_table(m):
    """The learned sparse-token embeddings as rows ne = (D, 5), in KIND_* order."""
    names = ["not_a_point_embed"] + [f"point_embeddings.{i}" for i in range(4)]
    table = m.get(f"{PE}.{names[0]}.weight")
    for name in names[1:]:
        table = ggpy.concat(table, m.get(f"{PE}.{name}.weight"), 1)
    return table


def sparse_embeddings(m, coords, kinds, keep, image_size: int):
    """Point and box-corner prompts of B prompts -> tokens ne = (D, N, B).

    coords ne = (2, N, B): (x, y) in pixels of the image_size x image_size encoder input (after SAM's
    ResizeLongestSide.apply_coords); kinds I32 ne = (N, B): each token's KIND_*; keep ne = (1, N, B): 1, or 0
    for the padding point whose positional encoding SAM zeroes. Pixel centres are at +0.5, as in SAM."""
    s = 1.0 / image_size
    pe = fourier_features(m, ggpy.scale(coords, s, 0.5 * s))
    rows = ggpy.get_rows(kind_table(m), ggpy.reshape_1d(kinds, kinds.nelements))
    return ggpy.add(ggpy.mul(pe, keep), ggpy.reshape_3d(rows, rows.ne[0], kinds.ne[0], kinds.ne[1]))


def conv_patches(m, prefix: str, x, stride: int):
    """Convolution (no padding) + bias of images x.ne = (W, H, Cin, B) -> (OW, OH, Cout, B)."""
    w = m.get(f"{prefix}.weight")
    y = ggpy.conv_2d(w, x, stride, stride, 0, 0, 1, 1)
    return ggpy.add(y, ggpy.reshape_3d(m.get(f"{prefix}.bias"), 1, 1, w.ne[3]))


def _norm_gelu(m, prefix: str, x):
    """LayerNorm2d (eps 1e-6) and GELU of images x.ne = (W, H, C, B) -> tokens ne = (C, W, H, B)."""
    t = ggpy.cont(ggpy.permute(x, 1, 2, 0, 3))
    return ggpy.gelu_erf(layer_norm(m, prefix, t, LN2D_EPS))


def mask_embedding(m, mask):
    """mask_downscaling of low-resolution masks (logits) mask.ne = (4E, 4E, 1, B) -> tokens ne = (D, E, E, B):
    conv 2x2/2, LayerNorm2d, GELU, conv 2x2/2, LayerNorm2d, GELU, conv 1x1."""
    p = f"{PE}.mask_downscaling"
    t = _norm_gelu(m, f"{p}.1", conv_patches(m, f"{p}.0", mask, 2))
    t = _norm_gelu(m, f"{p}.4", conv_patches(m, f"{p}.3", ggpy.permute(t, 2, 0, 1, 3), 2))
    return pointwise(m, f"{p}.6", t)


def dense_embeddings(m, mask=None):
    """The dense prompt, to add to the image embedding ne = (D, E, E): mask_embedding(mask), or without a mask
    the no_mask_embed vector ne = (D, 1, 1), which add() broadcasts over the grid."""
    if mask is not None:
        return mask_embedding(m, mask)
    w = m.get(f"{PE}.no_mask_embed.weight")
    return ggpy.reshape_3d(w, w.ne[0], 1, 1)
