"""MobileSAM's mask decoder (SAM's MaskDecoder with its TwoWayTransformer) as ggpy graph builders.

Tokens are channels-contiguous: prompt tokens ne = (D, T, B), the image embedding ne = (D, E, E) seen as
D-vectors of E * E tokens (x fastest, as SAM's flatten(2)). B prompts of one shape are decoded at once (a batch
in the last dimension; the image embedding is shared). A transposed convolution whose stride equals its
kernel writes every output pixel once, so the output upscaling runs as one GEMM per layer and a pixel shuffle.
The decoder predicts all num_mask_tokens masks; mask 0 is SAM's single-mask output, masks 1.. its multimask
outputs (the caller picks, as MaskDecoder.forward does).
"""
from __future__ import annotations

from dataclasses import dataclass

import ggpy

from .encoder import layer_norm, linear
from .prompt_encoder import LN2D_EPS, dense_embeddings

MD = "mask_decoder"
TR = f"{MD}.transformer"


@dataclass(frozen=True)
class DecoderParams:
    """Hyper-parameters of the prompt encoder and mask decoder, read from the GGUF metadata."""
    image_size: int
    embed_dim: int
    depth: int
    num_heads: int
    num_mask_tokens: int

    @classmethod
    def from_metadata(cls, md: dict) -> DecoderParams:
        def get(key):
            full = f"mobilesam.{key}"
            if full not in md:
                raise ggpy.ModelFileError(f"model file has no metadata field {full!r}; expected a GGUF written by "
                                          "`ggpy-sam convert` (convert the checkpoint again)")
            return int(md[full])
        return cls(get("image_size"), get("prompt_embed_dim"), get("decoder_depth"), get("decoder_num_heads"),
                   get("num_multimask_outputs") + 1)

    @property
    def embed_size(self) -> int:
        """Side E of the image embedding (image_size / 16)."""
        return self.image_size // 16

    @property
    def mask_size(self) -> int:
        """Side of the low-resolution masks and of the mask input (4E)."""
        return 4 * self.embed_size


def as_f32(t):
    """t, or an F32 copy of it when it is stored otherwise (the `.weight` tables of an F16 file)."""
    if t.type == ggpy.F32:
        return t
    return ggpy.cpy(t, ggpy.Context().new_tensor(ggpy.F32, t.ne))


def attention(m, prefix: str, q, k, v, n_heads: int):
    """SAM's Attention: q ne = (D, Nq, B or 1), k and v ne = (D, Nk, B or 1) -> (D, Nq, B). q/k/v projected to I
    channels (D / downsample rate), split into n_heads heads, softmax(q k^T / sqrt(I / n_heads)) v, out_proj. Keys
    shared by the batch (B = 1) broadcast in the products; shared queries are read B times through a view of
    stride 0 (no copy)."""
    qp, kp, vp = (linear(m, f"{prefix}.{name}_proj", x) for name, x in (("q", q), ("k", k), ("v", v)))
    inner, batch = qp.ne[0], max(q.ne[2], k.ne[2])
    hd = inner // n_heads

    def heads(x, b):   # (I, N, b or 1) -> (hd, N, heads, b) view
        es = x.type.size
        x4 = ggpy.view_4d(x, hd, n_heads, x.ne[1], b, hd * es, x.nb[1], x.nb[2] if x.ne[2] > 1 else 0)
        return ggpy.permute(x4, 0, 2, 1, 3)
    scores = ggpy.soft_max_ext(ggpy.mul_mat(heads(kp, kp.ne[2]), heads(qp, batch)), None, hd ** -0.5)
    v_t = ggpy.permute(ggpy.reshape_4d(vp, hd, n_heads, vp.ne[1], vp.ne[2]), 1, 2, 0, 3)  # (Nk, hd, heads, B)
    out = ggpy.mul_mat(v_t, scores)                                                      # (hd, Nq, heads, B)
    out = ggpy.cont_3d(ggpy.permute(out, 0, 2, 1, 3), inner, q.ne[1], batch)
    return linear(m, f"{prefix}.out_proj", out)


def two_way_block(m, prefix: str, queries, keys, query_pe, key_pe, n_heads: int, skip_first_layer_pe: bool):
    """TwoWayAttentionBlock: token self-attention, tokens -> image, ReLU MLP, image -> tokens, each followed by
    a residual and a LayerNorm. queries, query_pe ne = (D, T, B); keys ne = (D, N, B or 1: shared by the batch
    until their update), key_pe ne = (D, N) -> (queries, keys ne = (D, N, B))."""
    if skip_first_layer_pe:
        queries = attention(m, f"{prefix}.self_attn", queries, queries, queries, n_heads)
    else:
        q = ggpy.add(queries, query_pe)
        queries = ggpy.add(queries, attention(m, f"{prefix}.self_attn", q, q, queries, n_heads))
    queries = layer_norm(m, f"{prefix}.norm1", queries)
    k = ggpy.add(keys, key_pe)
    q = ggpy.add(queries, query_pe)
    queries = ggpy.add(queries, attention(m, f"{prefix}.cross_attn_token_to_image", q, k, keys, n_heads))
    queries = layer_norm(m, f"{prefix}.norm2", queries)
    mlp = linear(m, f"{prefix}.mlp.lin2", ggpy.relu(linear(m, f"{prefix}.mlp.lin1", queries)))
    queries = layer_norm(m, f"{prefix}.norm3", ggpy.add(queries, mlp))
    q = ggpy.add(queries, query_pe)
    keys = ggpy.add(attention(m, f"{prefix}.cross_attn_image_to_token", k, q, queries, n_heads), keys)
    return queries, layer_norm(m, f"{prefix}.norm4", keys)


def final_attention(m, queries, keys, query_pe, key_pe, n_heads: int):
    """The transformer's last tokens -> image attention, residual and norm_final_attn -> queries ne = (D, T)."""
    q = ggpy.add(queries, query_pe)
    k = ggpy.add(keys, key_pe)
    queries = ggpy.add(queries, attention(m, f"{TR}.final_attn_token_to_image", q, k, keys, n_heads))
    return layer_norm(m, f"{TR}.norm_final_attn", queries)


def two_way_transformer(m, hp: DecoderParams, image, image_pe, tokens):
    """TwoWayTransformer: image ne = (D, N, B or 1) and image_pe ne = (D, N) image tokens, tokens ne = (D, T, B)
    (also the queries' positional encoding) -> (queries ne = (D, T, B), keys ne = (D, N, B))."""
    queries, keys = tokens, image
    for i in range(hp.depth):
        queries, keys = two_way_block(m, f"{TR}.layers.{i}", queries, keys, tokens, image_pe, hp.num_heads, i == 0)
    return final_attention(m, queries, keys, tokens, image_pe, hp.num_heads), keys


def conv_transpose_patches(m, prefix: str, t):
    """ConvTranspose2d whose stride equals its kernel K, + bias, of tokens t.ne = (Cin, W, H, B) ->
    (Cout, K*W, K*H, B); kernel ne = (K, K, Cout, Cin) (torch's (Cin, Cout, K, K)). One GEMM gives every
    input pixel's K x K output patch, a pixel shuffle puts the patches in place."""
    w = m.get(f"{prefix}.weight")
    k, cout, cin = w.ne[0], w.ne[2], w.ne[3]
    _, iw, ih, b = t.ne
    wt = ggpy.cont(ggpy.permute(w, 2, 3, 1, 0))                                     # (Cin, Cout, Kx, Ky)
    y = ggpy.mul_mat(ggpy.reshape_2d(wt, cin, cout * k * k), ggpy.reshape_2d(t, cin, iw * ih * b))
    y = ggpy.add(y, m.get(f"{prefix}.bias"))                                         # (Cout Kx Ky, W H B)
    y = ggpy.cont(ggpy.permute(ggpy.reshape_4d(y, cout * k, k, iw, ih * b), 0, 2, 1, 3))  # (Cout Kx, W, Ky, H B)
    return ggpy.reshape_4d(y, cout, k * iw, k * ih, b)


def output_upscaling(m, t):
    """tokens t.ne = (D, E, E, B) -> (D/8, 4E, 4E, B): transposed conv 2x2/2, LayerNorm2d, GELU, transposed conv
    2x2/2, GELU."""
    p = f"{MD}.output_upscaling"
    t = ggpy.gelu_erf(layer_norm(m, f"{p}.1", conv_transpose_patches(m, f"{p}.0", t), LN2D_EPS))
    return ggpy.gelu_erf(conv_transpose_patches(m, f"{p}.3", t))


def mlp(m, prefix: str, x, n_layers: int = 3):
    """SAM's MLP: n_layers Linear layers with ReLU between them. x.ne = (IN, N, B) -> (OUT, N, B)."""
    for i in range(n_layers):
        x = linear(m, f"{prefix}.layers.{i}", x)
        if i + 1 < n_layers:
            x = ggpy.relu(x)
    return x


def column(t, i: int):
    """Column i of t.ne = (D, T, B): a view ne = (D, 1, B)."""
    return ggpy.view_3d(t, t.ne[0], 1, t.ne[2], t.nb[1], t.nb[2], i * t.nb[1])


def hypernetworks(m, hp: DecoderParams, queries):
    """Each mask token's output (columns 1..M of queries ne = (D, T, B)) through its own MLP -> ne = (D/8, M,
    B)."""
    h = None
    for i in range(hp.num_mask_tokens):
        y = mlp(m, f"{MD}.output_hypernetworks_mlps.{i}", column(queries, 1 + i))
        h = y if h is None else ggpy.concat(h, y, 1)
    return h


def iou_head(m, queries):
    """iou_prediction_head on the IoU token's output (column 0 of queries) -> ne = (M, 1, B)."""
    return mlp(m, f"{MD}.iou_prediction_head", column(queries, 0))


def output_tokens(m):
    """The IoU token and the mask tokens, ne = (D, 1 + M), F32."""
    return as_f32(ggpy.concat(m.get(f"{MD}.iou_token.weight"), m.get(f"{MD}.mask_tokens.weight"), 1))


def batched(t, ne):
    """t repeated to ne (a batch of copies in the last dimension), or t when it has that shape."""
    return t if t.ne == tuple(ne) + (1,) * (4 - len(ne)) else ggpy.repeat(t, ggpy.Context().new_tensor(t.type, ne))


def predict_masks(m, hp: DecoderParams, image, image_pe, sparse=None, mask=None, batch: int = 1):
    """MaskDecoder.predict_masks with the prompt encoder's dense part, for `batch` prompts of one shape.

    image, image_pe: the image embedding and the dense positional encoding as tokens ne = (D, E, E); sparse:
    prompt tokens ne = (D, N, B) or None (no point and no box); mask: low-resolution mask inputs
    ne = (4E, 4E, 1, B) or None. Returns (masks ne = (4E, 4E, M, B) low-resolution logits, iou ne = (M, 1, B))."""
    d, e = hp.embed_dim, hp.embed_size
    tokens = batched(output_tokens(m), (d, 1 + hp.num_mask_tokens, batch))
    if sparse is not None:
        tokens = ggpy.concat(tokens, sparse, 1)
    dense = dense_embeddings(m, mask)
    src = ggpy.add(dense, image) if mask is not None else ggpy.add(image, dense)
    keys = batched(ggpy.reshape_3d(src, d, e * e, src.ne[3]), (d, e * e, batch))
    queries, keys = two_way_transformer(m, hp, keys, ggpy.reshape_2d(image_pe, d, e * e), tokens)
    up = output_upscaling(m, ggpy.reshape_4d(keys, d, e, e, batch))                 # (D/8, 4E, 4E, B)
    hyper = hypernetworks(m, hp, queries)                                           # (D/8, M, B)
    masks = ggpy.mul_mat(ggpy.reshape_3d(up, up.ne[0], up.ne[1] * up.ne[2], batch), hyper)  # (4E * 4E, M, B)
    return ggpy.reshape_4d(masks, up.ne[1], up.ne[2], hp.num_mask_tokens, batch), iou_head(m, queries)
