"""The official MobileSAM (vit_t) architecture as data: every state-dict key with its torch shape.

Used to validate a checkpoint before conversion and to make seeded random weights without torch.
Shapes follow mobile_sam's `build_sam_vit_t()` (TinyViT-5M encoder, SAM prompt encoder and mask decoder).
"""
from __future__ import annotations

import itertools

import numpy as np

TINYVIT_5M = {
    "image_size": 1024, "embed_dims": (64, 128, 160, 320), "depths": (2, 2, 6, 2), "num_heads": (2, 4, 5, 10),
    "window_sizes": (7, 7, 14, 7), "mlp_ratio": 4.0, "mbconv_expand_ratio": 4.0, "local_conv_size": 3,
    "neck_dim": 256,
}
PROMPT_DIM = 256
MASK_IN_CHANS = 16
DECODER = {"depth": 2, "mlp_dim": 2048, "num_heads": 8, "num_multimask_outputs": 3, "iou_head_hidden_dim": 256,
           "attention_downsample_rate": 2}


def _conv_bn(shapes: dict, prefix: str, cout: int, cin_per_group: int, k: int):
    shapes[f"{prefix}.c.weight"] = (cout, cin_per_group, k, k)
    for name in ("weight", "bias", "running_mean", "running_var"):
        shapes[f"{prefix}.bn.{name}"] = (cout,)
    shapes[f"{prefix}.bn.num_batches_tracked"] = ()


def _linear(shapes: dict, prefix: str, n_out: int, n_in: int, bias: bool = True):
    shapes[f"{prefix}.weight"] = (n_out, n_in)
    if bias:
        shapes[f"{prefix}.bias"] = (n_out,)


def _norm(shapes: dict, prefix: str, n: int):
    shapes[f"{prefix}.weight"] = (n,)
    shapes[f"{prefix}.bias"] = (n,)


def n_attention_offsets(window: int) -> int:
    """Distinct (|dy|, |dx|) offsets between points of a window x window grid."""
    return window * window


def attention_bias_index(window: int) -> np.ndarray:
    """TinyViT's attention_bias_idxs (N, N), N = window²: the offset class of each (query, key) pair,
    numbered in order of first appearance as in its Attention.__init__."""
    points = list(itertools.product(range(window), range(window)))
    offsets, idxs = {}, []
    for p1 in points:
        for p2 in points:
            off = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
            idxs.append(offsets.setdefault(off, len(offsets)))
    n = len(points)
    return np.asarray(idxs, dtype=np.int64).reshape(n, n)


def image_encoder_shapes(hp: dict = TINYVIT_5M) -> dict:
    """State-dict shapes of `image_encoder.*` (TinyViT with SAM's neck)."""
    s, p = {}, "image_encoder"
    dims, depths = hp["embed_dims"], hp["depths"]
    _conv_bn(s, f"{p}.patch_embed.seq.0", dims[0] // 2, 3, 3)
    _conv_bn(s, f"{p}.patch_embed.seq.2", dims[0], dims[0] // 2, 3)
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        layer = f"{p}.layers.{i}"
        for j in range(depth):
            b = f"{layer}.blocks.{j}"
            if i == 0:
                hidden = int(dim * hp["mbconv_expand_ratio"])
                _conv_bn(s, f"{b}.conv1", hidden, dim, 1)
                _conv_bn(s, f"{b}.conv2", hidden, 1, 3)
                _conv_bn(s, f"{b}.conv3", dim, hidden, 1)
                continue
            heads, window = hp["num_heads"][i], hp["window_sizes"][i]
            s[f"{b}.attn.attention_biases"] = (heads, n_attention_offsets(window))
            _norm(s, f"{b}.attn.norm", dim)
            _linear(s, f"{b}.attn.qkv", 3 * dim, dim)
            _linear(s, f"{b}.attn.proj", dim, dim)
            _norm(s, f"{b}.mlp.norm", dim)
            hidden = int(dim * hp["mlp_ratio"])
            _linear(s, f"{b}.mlp.fc1", hidden, dim)
            _linear(s, f"{b}.mlp.fc2", dim, hidden)
            _conv_bn(s, f"{b}.local_conv", dim, 1, hp["local_conv_size"])
        if i + 1 < len(dims):
            out = dims[i + 1]
            _conv_bn(s, f"{layer}.downsample.conv1", out, dim, 1)
            _conv_bn(s, f"{layer}.downsample.conv2", out, 1, 3)
            _conv_bn(s, f"{layer}.downsample.conv3", out, out, 1)
    _norm(s, f"{p}.norm_head", dims[-1])
    _linear(s, f"{p}.head", 1000, dims[-1])
    neck = hp["neck_dim"]
    s[f"{p}.neck.0.weight"] = (neck, dims[-1], 1, 1)
    _norm(s, f"{p}.neck.1", neck)
    s[f"{p}.neck.2.weight"] = (neck, neck, 3, 3)
    _norm(s, f"{p}.neck.3", neck)
    return s


def prompt_encoder_shapes(dim: int = PROMPT_DIM, mask_in_chans: int = MASK_IN_CHANS) -> dict:
    """State-dict shapes of `prompt_encoder.*`."""
    s, p = {}, "prompt_encoder"
    s[f"{p}.pe_layer.positional_encoding_gaussian_matrix"] = (2, dim // 2)
    for i in range(4):
        s[f"{p}.point_embeddings.{i}.weight"] = (1, dim)
    s[f"{p}.not_a_point_embed.weight"] = (1, dim)
    q = mask_in_chans // 4
    s[f"{p}.mask_downscaling.0.weight"], s[f"{p}.mask_downscaling.0.bias"] = (q, 1, 2, 2), (q,)
    _norm(s, f"{p}.mask_downscaling.1", q)
    s[f"{p}.mask_downscaling.3.weight"], s[f"{p}.mask_downscaling.3.bias"] = (mask_in_chans, q, 2, 2), (mask_in_chans,)
    _norm(s, f"{p}.mask_downscaling.4", mask_in_chans)
    s[f"{p}.mask_downscaling.6.weight"], s[f"{p}.mask_downscaling.6.bias"] = (dim, mask_in_chans, 1, 1), (dim,)
    s[f"{p}.no_mask_embed.weight"] = (1, dim)
    return s


def _attention(s: dict, prefix: str, dim: int, downsample: int):
    inner = dim // downsample
    for name in ("q_proj", "k_proj", "v_proj"):
        _linear(s, f"{prefix}.{name}", inner, dim)
    _linear(s, f"{prefix}.out_proj", dim, inner)


def mask_decoder_shapes(dim: int = PROMPT_DIM, cfg: dict = DECODER) -> dict:
    """State-dict shapes of `mask_decoder.*` (two-way transformer, upscaling, hypernetworks, IoU head)."""
    s, p = {}, "mask_decoder"
    t = f"{p}.transformer"
    down = cfg["attention_downsample_rate"]
    for i in range(cfg["depth"]):
        layer = f"{t}.layers.{i}"
        _attention(s, f"{layer}.self_attn", dim, 1)
        _norm(s, f"{layer}.norm1", dim)
        _attention(s, f"{layer}.cross_attn_token_to_image", dim, down)
        _norm(s, f"{layer}.norm2", dim)
        _linear(s, f"{layer}.mlp.lin1", cfg["mlp_dim"], dim)
        _linear(s, f"{layer}.mlp.lin2", dim, cfg["mlp_dim"])
        _norm(s, f"{layer}.norm3", dim)
        _norm(s, f"{layer}.norm4", dim)
        _attention(s, f"{layer}.cross_attn_image_to_token", dim, down)
    _attention(s, f"{t}.final_attn_token_to_image", dim, down)
    _norm(s, f"{t}.norm_final_attn", dim)
    n_masks = cfg["num_multimask_outputs"] + 1
    s[f"{p}.iou_token.weight"] = (1, dim)
    s[f"{p}.mask_tokens.weight"] = (n_masks, dim)
    s[f"{p}.output_upscaling.0.weight"], s[f"{p}.output_upscaling.0.bias"] = (dim, dim // 4, 2, 2), (dim // 4,)
    _norm(s, f"{p}.output_upscaling.1", dim // 4)
    s[f"{p}.output_upscaling.3.weight"], s[f"{p}.output_upscaling.3.bias"] = (dim // 4, dim // 8, 2, 2), (dim // 8,)
    for i in range(n_masks):
        m = f"{p}.output_hypernetworks_mlps.{i}.layers"
        _linear(s, f"{m}.0", dim, dim)
        _linear(s, f"{m}.1", dim, dim)
        _linear(s, f"{m}.2", dim // 8, dim)
    h = cfg["iou_head_hidden_dim"]
    _linear(s, f"{p}.iou_prediction_head.layers.0", h, dim)
    _linear(s, f"{p}.iou_prediction_head.layers.1", h, h)
    _linear(s, f"{p}.iou_prediction_head.layers.2", n_masks, h)
    return s


def official_shapes() -> dict:
    """Every key of the official mobile_sam.pt state dict with its torch shape (439 keys)."""
    return {**image_encoder_shapes(), **prompt_encoder_shapes(), **mask_decoder_shapes()}
