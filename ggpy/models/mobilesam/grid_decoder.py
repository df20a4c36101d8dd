"""The mask decoder for a batch of prompts without mask input, with the work its first block shares computed once.

Without a mask input every prompt's image tokens start equal (the image embedding plus no_mask_embed), so in the
first two-way block the keys' positional sum, the token -> image attention's key and value projections and the
image -> token attention's query projection are the same for every prompt: they are computed once (batch 1) and
broadcast in the attention products (mask_decoder's two_way_transformer on keys of batch 1), instead of once per
prompt as in mask_decoder.predict_masks. From the first block's image update on, the keys differ per prompt. Same results up to float
rounding; about a quarter fewer multiply-adds per prompt.

The output upscaling's transposed convolutions run as GEMMs whose bias (tiled over the kernel positions) and GELU
ride in the GEMM's epilogue, and the last one's pixel shuffle moves to the M masks of the hypernetwork product
instead of its D/8 channels (the product is per pixel, so it commutes with the shuffle).
"""
from __future__ import annotations

import math

import numpy as np

import ggpy

from .encoder import layer_norm
from .mask_decoder import MD, DecoderParams, batched, hypernetworks, iou_head, output_tokens, two_way_transformer
from .prompt_encoder import LN2D_EPS, dense_embeddings, sparse_embeddings


def tiled_bias(m, prefix: str):
    """The bias ne = (Cout,) of a transposed convolution with kernel K tiled to ne = (Cout K K,), the row layout
    of transposed_conv_gemm's result."""
    bias, k = m.get(f"{prefix}.bias"), m.get(f"{prefix}.weight").ne[0]
    return ggpy.repeat(bias, ggpy.Context().new_tensor(bias.type, (bias.ne[0] * k * k,)))


def transposed_conv_gemm(m, prefix: str, t, bias, act=None):
    """ConvTranspose2d with stride = kernel K of tokens t.ne = (Cin, W, H, B), before its pixel shuffle: ne =
    (Cout Kx Ky, W H B) = every input pixel's K x K output patch, + bias (tiled_bias) and the activation `act`
    (a ggpy unary op), which the GEMM's epilogue computes."""
    w = m.get(f"{prefix}.weight")
    k, cout, cin = w.ne[0], w.ne[2], w.ne[3]
    wt = ggpy.cont(ggpy.permute(w, 2, 3, 1, 0))                                          # (Cin, Cout, Kx, Ky)
    y = ggpy.add(ggpy.mul_mat(ggpy.reshape_2d(wt, cin, cout * k * k), ggpy.reshape_2d(t, cin, t.nelements // cin)),
                 bias)
    return act(y) if act is not None else y


def shuffled_view(y, c: int, k: int, w: int, h: int, n: int):
    """K x K patches y ne = (C Kx Ky, W H N) (C innermost) as a view whose elements, in ne order, are the images
    (C, K W, K H, N): ne = (C Kx, W, Ky, H N)."""
    return ggpy.permute(ggpy.reshape_4d(y, c * k, k, w, h * n), 0, 2, 1, 3)


def pixel_shuffle(y, c: int, k: int, w: int, h: int, n: int):
    """K x K patches y ne = (C Kx Ky, W H N) (C innermost) -> images ne = (C, K W, K H, N)."""
    return ggpy.reshape_4d(ggpy.cont(shuffled_view(y, c, k, w, h, n)), c, k * w, k * h, n)


def upscaled_masks(m, keys, hyper, biases):
    """output_upscaling of keys ne = (D, E, E, B) and the hypernetwork product with hyper ne = (D/8, M, B) ->
    low-resolution masks (4E, 4E, M, B) as shuffled_view gives them (cont or cpy them). biases: tiled_bias of the two
    transposed convolutions."""
    p = f"{MD}.output_upscaling"
    d, e, _, b = keys.ne
    c1 = biases[0].ne[0] // 4
    y = pixel_shuffle(transposed_conv_gemm(m, f"{p}.0", keys, biases[0]), c1, 2, e, e, b)        # (D/4, 2E, 2E, B)
    y = ggpy.gelu_erf(layer_norm(m, f"{p}.1", y, LN2D_EPS))
    y = transposed_conv_gemm(m, f"{p}.3", y, biases[1], ggpy.gelu_erf)                  # (D/8 2 2, 2E 2E B)
    c2, m_masks = biases[1].ne[0] // 4, hyper.ne[1]
    masks = ggpy.mul_mat(ggpy.reshape_3d(y, c2, y.nelements // (c2 * b), b), hyper)     # (2 2 2E 2E, M, B)
    return shuffled_view(masks, 1, 2, 2 * e, 2 * e, m_masks * b)


def predict_masks(m, hp: DecoderParams, image, image_pe, sparse, batch: int, biases):
    """mask_decoder.predict_masks without mask input: image, image_pe ne = (D, E, E), sparse prompt tokens
    ne = (D, N, B), biases as upscaled_masks takes them -> (low-resolution logits (4E, 4E, M, B) as a view in
    ne order (upscaled_masks), iou ne = (M, 1, B))."""
    d, e = hp.embed_dim, hp.embed_size
    tokens = ggpy.concat(batched(output_tokens(m), (d, 1 + hp.num_mask_tokens, batch)), sparse, 1)
    keys = ggpy.reshape_3d(ggpy.add(image, dense_embeddings(m)), d, e * e, 1)
    pe = ggpy.reshape_2d(image_pe, d, e * e)
    queries, keys = two_way_transformer(m, hp, keys, pe, tokens)       # keys shared until block 0's image update
    masks = upscaled_masks(m, ggpy.reshape_4d(keys, d, e, e, batch), hypernetworks(m, hp, queries), biases)
    return masks, iou_head(m, queries)


class GridDecoderGraph:
    """The decoder of B prompts of n_sparse point tokens without mask input, planned once and re-evaluated per batch.
    Each run writes the low-resolution masks of all M mask tokens into `store` (ne = (4E 4E, M B), row m + M b: mask
    token m of prompt b), a tensor of the backend's memory that later graphs read (mask_stats gathers the masks it
    keeps from there), and returns only the IoU predictions."""

    def __init__(self, model, hp: DecoderParams, backends, image, image_pe, n_sparse: int, batch: int):
        ctx = ggpy.Context()
        s, m = hp.mask_size, hp.num_mask_tokens
        self.batch = batch
        self.coords = ctx.new_tensor(ggpy.F32, (2, n_sparse, batch)).set_name("coords").set_input()
        self.kinds = ctx.new_tensor(ggpy.I32, (n_sparse, batch)).set_name("kinds").set_input()
        self.keep = ctx.new_tensor(ggpy.F32, (1, n_sparse, batch)).set_name("keep").set_input()
        stored = ggpy.Context()
        self.store = stored.new_tensor(ggpy.F32, (s * s, m * batch)).set_name("mask_store")
        self._buffer = ggpy.alloc_ctx_tensors(stored, backends[0])
        sparse = sparse_embeddings(model, self.coords, self.kinds, self.keep, hp.image_size)
        biases = [tiled_bias(model, f"{MD}.output_upscaling.{i}") for i in (0, 3)]
        masks, self.iou = predict_masks(model, hp, image, image_pe, sparse, batch, biases)
        written = ggpy.cpy(masks, self.store)                 # the last pixel shuffle writes into the store
        self.graph = ggpy.Graph()
        for t in (*biases, written, self.iou):   # the biases first: the fusion pass finds them ready for the GEMMs
            self.graph.build_forward_expand(t)
        self.runner = ggpy.GraphRunner(self.graph, backends)     # one split, no copies, when backends[0] runs it all

    def run(self, coords, kinds, keep) -> np.ndarray:
        """Evaluate on B prompts (sparse_prompt's arrays stacked: (B, N, 2), (B, N), (B, N, 1)) -> IoU predictions
        float32 (B, M); the masks are in `store`."""
        b = self.batch
        self.runner.set(coords=np.reshape(coords, (1, b, -1, 2)), kinds=np.reshape(kinds, (1, 1, b, -1)),
                        keep=np.reshape(keep, (1, b, -1, 1)))
        return self.runner.compute().get(self.iou).reshape(b, -1)

    def masks(self) -> np.ndarray:
        """The last run's low-resolution masks, float32 (B, M, 4E, 4E) (a copy from the backend)."""
        s = math.isqrt(self.store.ne[0])
        return self.runner.get(self.store).reshape(self.batch, -1, s, s)
