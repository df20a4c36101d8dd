"""Cases for mul_mat: odd sizes, broadcasting of a over dims 2 and 3, F16 operands, transposed inputs, quantized
weights."""
from __future__ import annotations

from ... import ops
from ...types import BF16, F16, F32, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q6_K, Q8_0, QUANT_TYPES
from ..harness import OpCase
from ..references import evaluate
from .util import layout, leaf


def _flops(node):
    return 2 * node.src[0].ne[0] * node.nelements


SHAPES = [  # (K, M, N, a dims 2-3, b dims 2-3)
    (64, 32, 16, (1, 1), (1, 1)),
    (1, 1, 1, (1, 1), (1, 1)),
    (67, 33, 5, (1, 1), (1, 1)),
    (16, 8, 9, (2, 3), (4, 3)),
    (16, 8, 9, (1, 1), (3, 2)),
    (31, 1, 7, (3, 2), (3, 4)),
    (256, 128, 100, (1, 1), (1, 1)),
    (45, 70, 300, (1, 1), (1, 1)),        # own GEMM: edge tiles in every dimension
    (400, 40, 270, (1, 1), (1, 1)),       # own GEMM: K deeper than one packed block
    (20, 64, 100, (1, 1), (3, 2)),        # own GEMM: one a for 6 matrices of b, merged into 600 rows
    (24, 33, 260, (2, 1), (2, 3)),        # own GEMM: a broadcast over dim 3, repacked per matrix
]
GEMM_LAYOUT_SHAPE = ((24, 40, 3, 2), (24, 270, 3, 2))
"""a, b shapes of the layout cases big enough for the own GEMM."""


def cases():
    out = []
    for ta in (F32, F16, BF16):
        for tb in (F32, F16) if ta != BF16 else (F32, BF16):
            for k, m, n, ad, bd in SHAPES:
                out.append(OpCase("mul_mat", f"{ta.name},{tb.name},K={k},M={m},N={n},a23={ad},b23={bd}",
                                  lambda ctx, ta=ta, tb=tb, k=k, m=m, n=n, ad=ad, bd=bd: ops.mul_mat(
                                      layout(ctx, ta, (k, m) + ad), layout(ctx, tb, (k, n) + bd)),
                                  flops=_flops, max_nmse=5e-7))
    for ne_a, ne_b in (((24, 10, 3, 2), (24, 7, 3, 2)), GEMM_LAYOUT_SHAPE):
        for how_a in ("cont", "permuted", "padded", "permuted3"):
            for how_b in ("cont", "permuted", "padded", "permuted3"):
                out.append(OpCase("mul_mat", f"f32,a={how_a},b={how_b},a={ne_a},b={ne_b}",
                                  lambda ctx, ha=how_a, hb=how_b, ne_a=ne_a, ne_b=ne_b: ops.mul_mat(
                                      layout(ctx, F32, ne_a, ha), layout(ctx, F32, ne_b, hb)),
                                  flops=_flops, max_nmse=5e-7))
    out += epilogue_cases() + cast_epilogue_cases() + quant_cases() + mmvq_cases() + mmvq_batch_cases() + gqa_cases()
    out += decode_fusion_cases() + norm_mat_vec_cases()
    out.append(OpCase("mul_mat", "f32,perf,K=1024,M=1024,N=1024",
                      lambda ctx: ops.mul_mat(layout(ctx, F32, (1024, 1024)), layout(ctx, F32, (1024, 1024))),
                      flops=_flops, max_nmse=5e-7, tags=("perf",)))
    return out


def _bias_act(ctx, wtype, k, m, n, batch, act):
    """act(mul_mat(w, x) + bias): the epilogue pattern the CPU fuses into its GEMM (fusion.py)."""
    w = leaf(ctx, wtype, (k, m))
    y = ops.add(ops.mul_mat(w, leaf(ctx, F32, (k, n, batch))), leaf(ctx, F32, (m,)))
    return getattr(ops, act)(y) if act else y


def epilogue_cases():
    """mul_mat -> add(bias) [-> activation] on shapes the CPU runs on its own GEMM with the epilogue applied per
    256-row chunk: M >= 32, K >= 16, several chunks and a ragged last one (N = 700), batches; the kernel that ran
    is checked (the own GEMM, fused), and the reference is every node's in turn from the leafs."""
    out = []
    for wtype in (F32, F16):
        for act in (None, "gelu_erf", "silu", "relu"):
            for k, m, n, batch in ((40, 48, 700, 1), (17, 33, 513, 2)):
                name = "gemm" + ("\\+to_f32" if wtype == F16 else "") + "\\+bias" + (f"\\+{act}" if act else "")
                out.append(OpCase(act or "add", f"fused,mul_mat+bias,w={wtype.name},K={k},M={m},N={n},B={batch}",
                                  lambda ctx, wt=wtype, k=k, m=m, n=n, b=batch, a=act: _bias_act(ctx, wt, k, m, n, b, a),
                                  max_nmse=5e-7, reference=evaluate, kernel=name))
    return out


def cast_epilogue_cases():
    """Activations kept in half precision: product -> cast -> bias [-> act | + r] (one cuBLASLt call on CUDA)."""
    out = []
    for t in (F16, BF16):
        for tail in (None, "gelu_erf", "residual"):
            out.append(OpCase("add" if tail in (None, "residual") else tail, f"fused,mul_mat+cast+bias,{t.name},"
                              f"{tail}", lambda ctx, t=t, tail=tail: _cast_bias(ctx, t, tail), reference=evaluate,
                              max_nmse=HALF_NMSE[t]))
    return out


HALF_NMSE = {F16: 1e-5, BF16: 2e-4}
"""Tolerances of results rounded to F16 / BF16 more than once on the way."""


def _cast_bias(ctx, t, tail):
    """tail(add(cast(mul_mat(w, x), t), bias)) with w, x, bias (and the residual) of type t."""
    y = ops.add(ops.cast(ops.mul_mat(leaf(ctx, t, (40, 48)), leaf(ctx, t, (40, 70, 2))), t), leaf(ctx, t, (48,)))
    if tail == "residual":
        return ops.add(y, leaf(ctx, t, (48, 70, 2)))
    return getattr(ops, tail)(y) if tail else y


QUANT_NMSE = 1e-9
"""Quantized a: the weights are dequantized exactly (as gguf.quants), so what differs from the float64 reference is
float32 accumulation over K <= 768: relative error ~ sqrt(K) * 2^-24 ~ 2e-6 per output, nmse ~ 1e-11; any format
error (a nibble, bit or scale out of place) gives nmse > 1e-4."""
Q8_NMSE = 1e-3
"""Few columns of b times a quantized a on integer dot products (the default on CUDA and the CPU): b's columns
rounded to 8 bits per block (step max|x| / 127, error variance step^2 / 12) give nmse ~1.5e-5 on uniform inputs,
up to ~2e-4 over the few outputs of a small case; a format error (a nibble, bit or scale out of place) > 1e-2."""
Q8_TILED = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
"""Types whose products with up to 48 rows of b the CPU takes on integer dot products too (register tiles)."""
QUANT_GEMM_NMSE = 1e-6
"""More than 16 columns of b per matrix: CUDA runs a tensor-core GEMM on F16 copies of the dequantized a and of b (as
ggml's cuBLAS path), each rounded by up to 2^-11: nmse ~ 1e-7."""


def quant_cases():
    """Every quantized type as a (K a multiple of 32, or 256 for the K-quants; 576 = 18 x 32 is not of 256), F32 b:
    N = 1 and 3 (dot products), 7, 17 (CUDA: the fewest columns its GEMM takes) and 64 (dequantized panels), a broadcast
    over dims 2 and 3, b transposed (read in place, its rows strided)."""
    out = []
    for t in QUANT_TYPES:
        k0, k1, k2 = (512, 768, 512) if t.block == 256 else (256, 576, 512)
        for k, m, n, ad, bd, how in ((k0, 33, 1, (1, 1), (1, 1), "cont"), (k1, 40, 7, (1, 1), (1, 1), "cont"),
                                     (k2, 70, 64, (1, 1), (1, 1), "cont"), (k0, 16, 3, (2, 1), (4, 3), "cont"),
                                     (k1, 24, 17, (1, 2), (2, 2), "cont"), (k0, 20, 2, (1, 1), (1, 1), "permuted")):
            rows = n * (bd[0] * bd[1] if ad == (1, 1) else 1)
            impl = "(q8|dot)" if rows <= 8 else "(q8|gemm|blas)" if rows <= 48 and t in Q8_TILED else "(gemm|blas)"
            out.append(OpCase("mul_mat", f"{t.name},f32,K={k},M={m},N={n},a23={ad},b23={bd},b={how}",
                              lambda ctx, t=t, k=k, m=m, n=n, ad=ad, bd=bd, how=how: ops.mul_mat(
                                  leaf(ctx, t, (k, m) + ad), layout(ctx, F32, (k, n) + bd, how)),
                              flops=_flops, max_nmse=Q8_NMSE if "q8" in impl else QUANT_GEMM_NMSE,
                              kernel=f"{impl}_{t.name}"))
    return out


def _mmvq(tag: str, shapes: tuple) -> list:
    """Every quantized type times b of `shapes` ((K: index into the type's (k0, k1), M, N, a's dims 2-3, b's, b's
    layout), ...)."""
    out = []
    for t in QUANT_TYPES:
        ks = (768, 4096) if t.block == 256 else (544, 2048)
        for kk, m, n, ad, bd, how in shapes:
            k = ks[kk]
            out.append(OpCase("mul_mat", f"{tag},{t.name},K={k},M={m},N={n},a23={ad},b23={bd},b={how}",
                              lambda ctx, t=t, k=k, m=m, n=n, ad=ad, bd=bd, how=how: ops.mul_mat(
                                  leaf(ctx, t, (k, m) + ad), layout(ctx, F32, (k, n) + bd, how)),
                              flops=_flops, max_nmse=Q8_NMSE))
    return out


def mmvq_cases():
    """Every quantized type times 1 to 8 columns of b (the integer dot-product kernels): rows past the last full
    block of rows, K of 17 units (lanes idle) and of 2 per lane (a second pass), b with gaps between its rows, a
    broadcast over dims 2 and 3, b strided (permuted)."""
    return _mmvq("mmvq", ((0, 37, 1, (1, 1), (1, 1), "cont"), (1, 9, 8, (1, 1), (1, 1), "cont"),
                          (0, 6, 2, (1, 1), (1, 1), "padded"), (0, 5, 1, (1, 1), (1, 2), "permuted3"),
                          (0, 7, 2, (2, 1), (4, 3), "cont"), (0, 11, 3, (1, 1), (1, 1), "permuted")))


def mmvq_batch_cases():
    """Every quantized type times 9, 12 and 16 columns of b (a server's batched decode, a token a sequence; CUDA's
    integer dot-product batch kernels, mmvq_b): rows past the last full block of rows and an odd last pair of a warp,
    K of 17 units (lanes idle) and of 2 per lane, b with gaps between its rows, a broadcast over dims 2 and 3, b
    strided (permuted)."""
    return _mmvq("mmvq_b", ((0, 37, 9, (1, 1), (1, 1), "cont"), (1, 20, 12, (1, 1), (1, 1), "cont"),
                            (0, 64, 16, (1, 1), (1, 1), "cont"), (0, 6, 10, (1, 1), (1, 1), "padded"),
                            (0, 7, 12, (2, 1), (4, 3), "cont"), (0, 11, 16, (1, 1), (1, 1), "permuted")))


def _gqa(ctx, t, hd, n_kv, n, heads, kv_heads, product):
    """A decoder's attention products over a KV cache of type t (hd, kv_heads, n_kv + 3 rows), read through views
    as a llama graph does, the query heads sharing KV heads by broadcasting: "kq" (K (hd, n_kv, kv_heads) against q
    (hd, n, heads), both permuted views) or "kqv" (V^T (n_kv, hd, kv_heads), a strided view, against P)."""
    cache = leaf(ctx, t, (hd, kv_heads, n_kv + 3))
    rows = ops.view_3d(cache, hd, kv_heads, n_kv, cache.nb[1], cache.nb[2], 0)
    if product == "kq":
        return ops.mul_mat(ops.permute(rows, 0, 2, 1, 3), ops.permute(leaf(ctx, F32, (hd, heads, n)), 0, 2, 1, 3))
    return ops.mul_mat(ops.permute(rows, 1, 2, 0, 3), leaf(ctx, F32, (n_kv, n, heads)))


def gqa_cases():
    """Grouped-query attention's products (ggml broadcasting a over b's dims 2 and 3: heads / kv_heads query heads
    per KV head), a generated token and a prompt, from F32 and F16 caches."""
    out = []
    for t in (F32, F16):
        for hd, n_kv, n, heads, kv_heads in ((64, 37, 1, 9, 3), (64, 37, 7, 9, 3), (32, 48, 3, 12, 4), (32, 20, 20, 8, 1)):
            for product in ("kq", "kqv"):
                out.append(OpCase("mul_mat", f"gqa,{product},cache={t.name},HD={hd},n_kv={n_kv},n={n},heads={heads}/"
                                  f"{kv_heads}", lambda ctx, t=t, hd=hd, nk=n_kv, n=n, h=heads, kh=kv_heads, p=product:
                                  _gqa(ctx, t, hd, nk, n, h, kh, p), flops=_flops, max_nmse=5e-7))
    return out


DECODE_Q8_NMSE = 1e-3
"""A fused decode product of a quantized a may multiply with b's columns rounded to 8 bits per block (integer dot
products: nmse ~1e-5, up to ~2e-4 on a small case); a format or fusion error gives > 1e-2."""


def _glu(ctx, t, k, m, n, act, up_first):
    """mul(act(gate), up) of gate = mul_mat(Wg, x), up = mul_mat(Wu, x) (the glu pattern; with up_first, up comes first
    in graph order and is mul's first operand)."""
    x = leaf(ctx, F32, (k, n))
    wg, wu = leaf(ctx, t, (k, m)), leaf(ctx, t, (k, m))
    if up_first:
        up = ops.mul_mat(wu, x)
        return ops.mul(up, getattr(ops, act)(ops.mul_mat(wg, x)))
    return ops.mul(getattr(ops, act)(ops.mul_mat(wg, x)), ops.mul_mat(wu, x))


def _mul_mat_add(ctx, t, k, m, n, residual_first):
    """add(r, mul_mat(W, x)) (a residual add, llama's order) or add(mul_mat(W, x), r): the mul_mat_add pattern."""
    y = ops.mul_mat(leaf(ctx, t, (k, m)), leaf(ctx, F32, (k, n)))
    r = leaf(ctx, F32, (m, n))
    return ops.add(r, y) if residual_first else ops.add(y, r)


def decode_fusion_cases():
    """The gate / up products with their gated unit and a product with its residual add, one token (mat-vec) to a few
    and a batch's worth (9 and 16 columns: CUDA's batch kernels), float and quantized weights; each against every
    node's reference in turn, and on the CPU run by its fused q8 mat-vec where the weights are quantized and b has at
    most 8 columns."""
    out = []
    for t in (F32, F16, Q4_0, Q8_0, Q4_K, Q6_K):
        nmse = DECODE_Q8_NMSE if t.quantized else 5e-7
        k0 = 256 if t.block == 256 else 64
        for k, m, n in ((k0, 96, 1), (2 * k0, 33, 3), (k0, 40, 9), (2 * k0, 37, 16)):
            q8 = f"q8_{t.name}\\+" if t.quantized and n <= 8 else None      # the CPU's fused q8 mat-vec
            for act, up_first in (("silu", False), ("silu", True), ("gelu", False)):
                out.append(OpCase("mul", f"fused,glu,{act},{t.name},K={k},M={m},N={n},up_first={up_first}",
                                  lambda ctx, t=t, k=k, m=m, n=n, a=act, u=up_first: _glu(ctx, t, k, m, n, a, u),
                                  reference=evaluate, max_nmse=nmse, kernel=q8 and f"{q8}glu_{act}"))
            for residual_first in (True, False):
                out.append(OpCase("add", f"fused,mul_mat+add,{t.name},K={k},M={m},N={n},r_first={residual_first}",
                                  lambda ctx, t=t, k=k, m=m, n=n, r=residual_first: _mul_mat_add(ctx, t, k, m, n, r),
                                  reference=evaluate, max_nmse=nmse, kernel=q8 and f"{q8}add"))
    return out


def _norm_mat_vec(ctx, types, k, ms, n, glu):
    """h = rms_norm(x) * w read only by mat-vecs of weights `types` ne = (k, m) for m in ms (the norm_mat_vec pattern):
    the products concatenated over ne[0], or with glu silu(first) * second."""
    h = ops.mul(ops.rms_norm(leaf(ctx, F32, (k, n)), 1e-6), leaf(ctx, F32, (k,)))
    ys = [ops.mul_mat(leaf(ctx, t, (k, m)), h) for t, m in zip(types, ms)]
    if glu:
        return ops.mul(ops.silu(ys[0]), ys[1])
    out = ys[0]
    for y in ys[1:]:
        out = ops.concat(out, y, 0)
    return out


def norm_mat_vec_cases():
    """An RMSNorm read only by products: llama's q, k, v (one weight type, or Q4_K with a Q6_K v), the gate / up pair
    of its feed-forward, its output head; small weights (CUDA: one launch) and big ones (over 4 MiB: the norm
    quantized once, then the products); then each with 16 columns (a batch: CUDA's norm quantized once, then the batch
    kernels)."""
    out = []
    groups = (((Q4_1,) * 3, 576, (576, 192, 192), False), ((Q4_K, Q4_K, Q6_K), 512, (256, 64, 64), False),
              ((Q4_0, Q4_0), 576, (96, 96), True), ((Q8_0,), 576, (8192,), False), ((Q8_0, Q8_0), 1024, (4096, 4096), True))
    for (types, k, ms, glu), ns in [(g, (1, 3)) for g in groups] + [(g, (16,)) for g in groups]:
        for n in ns:
            names = "+".join(t.name for t in types)
            out.append(OpCase("mul" if glu else "concat" if len(types) > 1 else "mul_mat",
                              f"fused,norm_mat_vec,{names},K={k},M={ms},N={n},glu={glu}",
                              lambda ctx, ts=types, k=k, ms=ms, n=n, g=glu: _norm_mat_vec(ctx, ts, k, ms, n, g),
                              reference=evaluate, max_nmse=DECODE_Q8_NMSE))
    return out
