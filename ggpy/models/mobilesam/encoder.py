"""MobileSAM's image encoder (TinyViT-5M + SAM's neck) as a ggpy graph, in the f(model, x) style.

Activations between stages are tokens: ne = (C, W, H) stored channels-most-contiguous (CWHN), so a
1x1 convolution is a plain mul_mat, a LayerNorm over channels is a norm along ne[0], and depthwise
convolutions run on the permuted (W, H, C) view of the same memory. Only the patch embedding (3x3 stride-2
convolutions on the image) and the neck's 3x3 convolution see the ordinary (W, H, C) layout.

Weights come from a GGUF written by convert.py (BatchNorms folded into their
convolutions as `<prefix>.weight` / `<prefix>.bias`, attention biases gathered into `<prefix>.ab`).
"""
from __future__ import annotations

from dataclasses import dataclass

import ggpy

ENC = "image_encoder"


@dataclass(frozen=True)
class EncoderParams:
    """Hyper-parameters of the TinyViT encoder, read from the GGUF metadata."""
    image_size: int
    embed_dims: tuple
    depths: tuple
    num_heads: tuple
    window_sizes: tuple
    mlp_ratio: float
    mbconv_expand_ratio: float
    local_conv_size: int
    neck_dim: int

    @classmethod
    def from_metadata(cls, md: dict) -> EncoderParams:
        def get(key):
            full = f"mobilesam.{key}"
            if full not in md:
                raise ggpy.ModelFileError(f"model file has no metadata field {full!r}; expected a GGUF written by "
                                          "`ggpy-sam convert`")
            return md[full]
        return cls(int(get("image_size")), tuple(int(v) for v in get("embed_dims")),
                   tuple(int(v) for v in get("depths")), tuple(int(v) for v in get("num_heads")),
                   tuple(int(v) for v in get("window_sizes")), float(get("mlp_ratio")),
                   float(get("mbconv_expand_ratio")), int(get("local_conv_size")), int(get("neck_dim")))

    @property
    def embed_size(self) -> int:
        """Side of the output embedding (image_size / 16)."""
        return self.image_size // 16


# -- building blocks ----------------------------------------------------------------------------------
def settle(y, type_):
    """y (a product, F32 as ggml computes them) in the activation type `type_`: the graph keeps activations in the
    type of its input (F32, F16 or BF16), casting right after each product."""
    return y if y.type == type_ else ggpy.cast(y, type_)


def contiguous(x, type_):
    """x (a view) as a contiguous tensor of `type_`: cont, or a cast that makes it contiguous on the way."""
    return ggpy.cont(x) if x.type == type_ else ggpy.cast(x, type_)


def linear(m, prefix: str, x, bias: bool = True):
    """x.ne = (IN, ...) -> (OUT, ...): weight ne = (IN, OUT) (a torch Linear), optional bias ne = (OUT,)."""
    y = settle(ggpy.mul_mat(m.get(f"{prefix}.weight"), x), x.type)
    return ggpy.add(y, m.get(f"{prefix}.bias")) if bias else y


def layer_norm(m, prefix: str, x, eps: float = 1e-5):
    """LayerNorm over ne[0] with weight and bias ne = (C,)."""
    return ggpy.add(ggpy.mul(ggpy.norm(x, eps), m.get(f"{prefix}.weight")), m.get(f"{prefix}.bias"))


def pointwise(m, prefix: str, t, bias: bool = True, act=None):
    """1x1 convolution of tokens t.ne = (Cin, W, H) -> (Cout, W, H): kernel ne = (1, 1, Cin, Cout), then the
    optional activation (a ggpy unary op, e.g. ggpy.gelu_erf)."""
    w = m.get(f"{prefix}.weight")
    cin, cout = w.ne[2], w.ne[3]
    y = settle(ggpy.mul_mat(ggpy.reshape_2d(w, cin, cout), ggpy.reshape_2d(t, cin, t.nelements // cin)), t.type)
    if bias:
        y = ggpy.add(y, m.get(f"{prefix}.bias"))
    if act is not None:
        y = act(y)
    return ggpy.reshape_4d(y, cout, t.ne[1], t.ne[2], t.ne[3])


def depthwise(m, prefix: str, t, stride: int = 1):
    """Depthwise KxK convolution (padding K // 2) + bias of tokens t.ne = (C, W, H, B) -> (C, OW, OH, B),
    computed in the channels-contiguous layout."""
    w = m.get(f"{prefix}.weight")
    pad = w.ne[0] // 2
    y = ggpy.conv_2d_dw(w, ggpy.permute(t, 2, 0, 1, 3), stride, stride, pad, pad, 1, 1)
    tokens = settle(ggpy.permute(y, 1, 2, 0, 3), t.type)             # back to (C, OW, OH, B), contiguous
    return ggpy.add(tokens, m.get(f"{prefix}.bias"))


def conv_bn(m, prefix: str, x, stride: int, type_=None):
    """Dense KxK convolution (padding K // 2) + bias of images x.ne = (W, H, Cin, B) -> (OW, OH, Cout, B), in
    `type_` (default x's type)."""
    w = m.get(f"{prefix}.weight")
    pad = w.ne[0] // 2
    y = settle(ggpy.conv_2d(w, x, stride, stride, pad, pad, 1, 1), type_ or x.type)
    return ggpy.add(y, ggpy.reshape_3d(m.get(f"{prefix}.bias"), 1, 1, w.ne[3]))


# -- TinyViT ------------------------------------------------------------------------------------------
def patch_embed(m, image, dtype=ggpy.F32):
    """images ne = (S, S, 3, B), F32 -> tokens (C0, S/4, S/4, B) of `dtype`: two 3x3 stride-2 convolutions with a
    GELU between (the first reads the F32 image and casts its result)."""
    p = f"{ENC}.patch_embed.seq"
    x = ggpy.gelu_erf(conv_bn(m, f"{p}.0", image, 2, dtype))
    x = conv_bn(m, f"{p}.2", x, 2)
    return ggpy.cont(ggpy.permute(x, 1, 2, 0, 3))                # (W, H, C) -> tokens (C, W, H)


def mbconv(m, prefix: str, t):
    """Inverted residual: 1x1 expand, GELU, 3x3 depthwise, GELU, 1x1 project, + t, GELU."""
    h = pointwise(m, f"{prefix}.conv1", t, act=ggpy.gelu_erf)
    h = ggpy.gelu_erf(depthwise(m, f"{prefix}.conv2", h))
    return ggpy.gelu_erf(ggpy.add(pointwise(m, f"{prefix}.conv3", h), t))


def patch_merging(m, prefix: str, t, stride: int):
    """1x1 conv, GELU, 3x3 depthwise (stride 2, or 1 into the last stage), GELU, 1x1 conv."""
    h = pointwise(m, f"{prefix}.conv1", t, act=ggpy.gelu_erf)
    h = ggpy.gelu_erf(depthwise(m, f"{prefix}.conv2", h, stride))
    return pointwise(m, f"{prefix}.conv3", h)


def window_attention(m, prefix: str, t, n_heads: int, window: int):
    """t + multi-head self-attention inside window x window windows (zero padded at the right and bottom, then
    normalised, as TinyViT) with a learned per-head bias table `ab` ne = (N, N, heads), N = window².
    t.ne = (C, W, H, B) -> (C, W, H, B). Scores, softmax and the weighted sum are F32 (the products of ggml)."""
    c, w_, h_ = t.ne[0], t.ne[1], t.ne[2]
    hd = c // n_heads
    n = window * window
    xw = ggpy.win_part(t, window)                                                # (C, w, w, nW * B)
    n_win = xw.ne[3]
    xw = layer_norm(m, f"{prefix}.norm", ggpy.reshape_3d(xw, c, n, n_win))
    qkv = linear(m, f"{prefix}.qkv", xw)                                         # (heads * 3hd, N, nW)
    f = qkv.type.size

    def part(i):   # (hd, heads, N, nW) view of q (0), k (1) or v (2)
        return ggpy.view_4d(qkv, hd, n_heads, n, n_win, 3 * hd * f, qkv.nb[1], qkv.nb[2], i * hd * f)
    q = ggpy.permute(part(0), 0, 2, 1, 3)                                        # (hd, N, heads, nW)
    k = ggpy.permute(part(1), 0, 2, 1, 3)
    v_t = ggpy.permute(part(2), 1, 2, 0, 3)              # (N, hd, heads, nW): sgemm reads it transposed in place
    scores = ggpy.soft_max_ext(ggpy.mul_mat(k, q), m.get(f"{prefix}.ab"), hd ** -0.5)  # (Nk, Nq, heads, nW)
    out = ggpy.permute(ggpy.mul_mat(v_t, scores), 0, 2, 1, 3)                   # (hd, heads, Nq, nW)
    out = ggpy.win_unpart(ggpy.reshape_4d(contiguous(out, t.type), c, window, window, n_win), w_, h_, window)
    # the projection acts per token: after win_unpart it skips the padding, and its residual add (t first: the sum
    # may take t's memory) rides along in the GEMM
    return ggpy.add(t, linear(m, f"{prefix}.proj", out))


def tinyvit_block(m, prefix: str, t, n_heads: int, window: int):
    """x + attention(x), 3x3 depthwise local conv, x + MLP(x). t.ne = (C, W, H, B)."""
    t = window_attention(m, f"{prefix}.attn", t, n_heads, window)
    t = depthwise(m, f"{prefix}.local_conv", t)
    h = layer_norm(m, f"{prefix}.mlp.norm", t)
    h = linear(m, f"{prefix}.mlp.fc2", ggpy.gelu_erf(linear(m, f"{prefix}.mlp.fc1", h)))
    return ggpy.add(t, h)


def neck(m, t):
    """1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d (eps 1e-6, no biases on the convs).
    t.ne = (C3, E, E, B) -> (E, E, 256, B), the (B, 256, E, E) embeddings, F32."""
    p = f"{ENC}.neck"
    x = layer_norm(m, f"{p}.1", pointwise(m, f"{p}.0", t, bias=False), 1e-6)     # (256, E, E, B)
    x = ggpy.permute(x, 2, 0, 1, 3)
    x = ggpy.conv_2d(m.get(f"{p}.2.weight"), x, 1, 1, 1, 1, 1, 1)                # (E, E, 256, B), F32
    x = layer_norm(m, f"{p}.3", contiguous(ggpy.permute(x, 1, 2, 0, 3), t.type), 1e-6)   # (256, E, E, B)
    return contiguous(ggpy.permute(x, 2, 0, 1, 3), ggpy.F32)


STAGES = ("patch_embed", "stage0", "stage1", "stage2", "stage3", "neck")


def image_encoder(m, hp: EncoderParams, images, dtype=ggpy.F32):
    """images ne = (S, S, 3, B), pre-processed, F32 -> embeddings ne = (S/16, S/16, 256, B), F32; activations
    in between of type `dtype` (F32, F16 or BF16). The output of each stage is named 'stage:<name>' (STAGES) so
    timings can be split by stage."""
    t = patch_embed(m, images, dtype).set_name("stage:patch_embed")
    for i, depth in enumerate(hp.depths):
        layer = f"{ENC}.layers.{i}"
        for j in range(depth):
            if i == 0:
                t = mbconv(m, f"{layer}.blocks.{j}", t)
            else:
                t = tinyvit_block(m, f"{layer}.blocks.{j}", t, hp.num_heads[i], hp.window_sizes[i])
        if i + 1 < len(hp.depths):
            stride = 1 if hp.embed_dims[i + 1] in (320, 448, 576) else 2    # as TinyViT's PatchMerging
            t = patch_merging(m, f"{layer}.downsample", t, stride)
        t.set_name(f"stage:stage{i}")
    return neck(m, t).set_name("stage:neck")
