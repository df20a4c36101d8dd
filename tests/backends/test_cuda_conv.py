"""The convolution family on the CUDA backend (its op cases run in test_backend_ops.py): the CWHN layout, the fast
3x3 CWHN depthwise kernel alone and with its bias + activation epilogue fused, large integer parameters, conv_2d
forced to im2col + cuBLASLt, bilinear resizing as the CPU. Skips where cuda-python or a GPU is missing."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.cases import conv
from ggpy.test_backend_ops.harness import run_case

pytest.importorskip("cuda.bindings.driver")

from ggpy.backends.cuda.kernels import conv as conv_kernels  # noqa: E402


def test_cwhn_result_keeps_its_layout(cuda_backend):
    case = conv.dw_case((9, 7, 6, 1), (3, 3), (1, 1), (2, 2), (2, 2), cwhn=True)    # dilated: the generic kernel
    assert cuda_backend.kernel_name(case.build(ggpy.Context())) == "conv_2d_dw_cwhn_f32_f32"
    assert run_case(case, cuda_backend).ok


# (W, H, C, N), stride, padding: the fast 3x3 CWHN depthwise kernel (conv_dw3_cwhn), 1 or 4 channels a thread,
# rows and columns not a multiple of its 2 x 8 outputs (several column strips too), padding 0-2, batches
DW3 = [((17, 13, 5, 2), 1, 1), ((17, 13, 5, 2), 2, 1), ((23, 9, 12, 1), 1, 1), ((23, 9, 12, 1), 2, 1),
       ((31, 6, 36, 2), 1, 0), ((30, 11, 8, 1), 2, 2), ((1, 1, 7, 2), 1, 1), ((64, 3, 160, 1), 1, 1),
       ((5, 4, 4, 1), 2, 0), ((9, 37, 8, 2), 2, 1), ((7, 26, 12, 1), 1, 1), ((3, 17, 4, 2), 1, 2)]


@pytest.mark.parametrize("ta", [ggpy.F32, ggpy.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("ne,s,p", DW3, ids=[f"{ne}-s{s}-p{p}" for ne, s, p in DW3])
def test_dw3_cwhn(cuda_backend, ne, s, p, ta):
    case = conv.dw_case(ne, (3, 3), (s, s), (p, p), (1, 1), ta, cwhn=True)
    node = case.build(ggpy.Context())
    vec = 4 if ne[2] % 4 == 0 else 1
    assert conv_kernels.dw_fast(node) == s
    assert cuda_backend.kernel_name(node) == f"conv_dw3_cwhn_s{s}_v{vec}_{ta.name.lower()}_f32_f32"
    result = run_case(case, cuda_backend)
    assert result.ok, f"{case.id}: {result.message}"


def _np_dw_tokens(x, w, b, s, p):
    """Depthwise 3x3 of tokens x (H, W, C) with kernel w (C, 1, 3, 3) and bias b (C,), float64."""
    H, W, C = x.shape
    xp = np.zeros((H + 2 * p, W + 2 * p, C))
    xp[p:p + H, p:p + W] = x
    OH, OW = (H + 2 * p - 3) // s + 1, (W + 2 * p - 3) // s + 1
    out = np.zeros((OH, OW, C))
    for kh in range(3):
        for kw in range(3):
            out += xp[kh:kh + s * (OH - 1) + 1:s, kw:kw + s * (OW - 1) + 1:s] * w[:, 0, kh, kw]
    return out + b


ERF = np.vectorize(math.erf)
ACTS = {None: lambda u: u, "gelu_erf": lambda u: 0.5 * u * (1 + ERF(u / np.sqrt(2))),
        "relu": lambda u: np.maximum(u, 0), "silu": lambda u: u / (1 + np.exp(-u))}


@pytest.mark.parametrize("act", list(ACTS) + ["read twice"])
@pytest.mark.parametrize("ne,s,wtype", [((20, 7, 24), 1, ggpy.F32), ((15, 9, 6), 2, ggpy.F32),
                                        ((33, 10, 16), 1, ggpy.F16)], ids=["s1-v4", "s2-v1", "f16w"])
def test_dw3_bias_act_fused(cuda_backend, ne, s, wtype, act):
    """Tokens (C, W, H) -> CWHN depthwise -> permute back -> add(bias) [-> activation] is one kernel writing the
    last node's memory (MobileSAM's depthwise blocks); an add read twice keeps its reader a node."""
    W, H, C = ne
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (C, W, H)).set_input()
    w = ctx.new_tensor(wtype, (3, 3, 1, C)).set_input()
    b = ctx.new_tensor(ggpy.F32, (C,)).set_input()
    y = ggpy.conv_2d_dw(w, ggpy.permute(ggpy.reshape_4d(x, C, W, H, 1), 2, 0, 1, 3), s, s, 1, 1, 1, 1)
    tokens = ggpy.permute(y, 1, 2, 0, 3)
    out = ggpy.add(ggpy.reshape_3d(tokens, C, tokens.ne[1], tokens.ne[2]), b)
    if act == "read twice":
        out = ggpy.mul(out, out)
    elif act:
        out = getattr(ggpy, act)(out)
    graph = ggpy.Graph()
    graph.build_forward_expand(out)
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    rng = np.random.default_rng(5)
    vals = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (x, w, b)}
    for t, v in vals.items():
        t.set(v)
    cuda_backend.compute(graph)
    wv = vals[w].astype(np.float16) if wtype == ggpy.F16 else vals[w]
    ref = _np_dw_tokens(vals[x].astype(np.float64), wv.astype(np.float64), vals[b], s, 1)
    ref = ref * ref if act == "read twice" else ACTS[act](ref)
    head = f"conv_dw3_cwhn_s{s}_v{4 if C % 4 == 0 else 1}_{wtype.name.lower()}_f32_f32+bias"
    names = [st.name for st in cuda_backend.program(graph)]
    assert names == ([head, "mul_c_f32_f32"] if act == "read twice" else [head + (f"+{act}" if act else "")])
    np.testing.assert_allclose(out.numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("build", [
    lambda a, b: ggpy.conv_2d(a, b, 300, 1, 256, 1, 1, 1),                 # stride and padding past 255
    lambda a, b: ggpy.conv_2d(a, b, 1, 1, 0, 1, 290, 1),                   # dilation 290
    lambda a, b: ggpy.im2col(a, b, 257, 1, 300, 0, 1, 1, True, ggpy.F32),
    lambda a, b: ggpy.pool_2d(b, "avg", 300, 2, 270, 1, 260, 0),
], ids=["conv_2d", "conv_2d_dilated", "im2col", "pool_2d"])
def test_large_integer_parameters(cuda_backend, build):
    """Strides, paddings, dilations and pool windows travel as int32 (Args.ip): values past 255 run on the GPU and
    agree with the CPU."""
    rng = np.random.default_rng(9)
    k_values = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    x_values = rng.standard_normal((1, 2, 9, 601)).astype(np.float32)
    outs = []
    for b in (cuda_backend, ggpy.CPUBackend(n_threads=2)):
        ctx = ggpy.Context()
        ka = ctx.new_tensor(ggpy.F32, (3, 3, 2, 2)).set_input()
        xb = ctx.new_tensor(ggpy.F32, (601, 9, 2, 1)).set_input()
        y = build(ka, xb)
        assert b.supports_op(y)
        graph = ggpy.Graph().build_forward_expand(y.set_output())
        ggpy.GraphAllocator(b).alloc_graph(graph)
        for leaf, values in ((ka, k_values), (xb, x_values)):
            if any(t is leaf for t in graph.leafs):               # pool_2d reads no kernel
                leaf.set(values)
        b.compute(graph)
        outs.append(y.numpy())
    assert outs[0].size > 0
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


CONV_2D = [c for c in conv.cases() if c.op == "conv_2d"]


@pytest.fixture(scope="module")
def im2col_backend(cuda_backend):
    return ggpy.backends.cuda.CUDABackend("cuda", force={"conv_2d": "im2col"})


@pytest.mark.parametrize("case", CONV_2D, ids=lambda c: c.id)
def test_conv_2d_im2col_gemm(im2col_backend, case, monkeypatch):
    """conv_2d forced to im2col bands (a small scratch budget: several bands) + cuBLASLt GEMMs."""
    pytest.importorskip("nvmath")
    monkeypatch.setattr(conv_kernels, "COLS_BUDGET", 4096)
    node = case.build(ggpy.Context())
    assert im2col_backend.impl_for(node) == "im2col"
    assert conv_kernels.uses_im2col(node, "im2col") == (node.nb[0] == 4 and (node.ne[1] == 1
                                                                           or node.nb[1] == 4 * node.ne[0]))
    result = run_case(case, im2col_backend)
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("impl", ["direct", "implicit"])
def test_conv_2d_forced(cuda_backend, impl):
    """conv_2d forced to conv_2d_direct (every case with K = Cin * KH * KW <= DIRECT_K) or to the implicit GEMM
    (every case, the shallow ones included, which choose() now gives to direct)."""
    forced = ggpy.backends.cuda.CUDABackend("cuda", force={"conv_2d": impl})
    cases = [c for c in CONV_2D if impl == "implicit" or conv_kernels.direct_possible(c.build(ggpy.Context()))]
    assert len(cases) >= 10
    for case in cases:
        result = run_case(case, forced)
        assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("t", [ggpy.F32, ggpy.F16, ggpy.BF16], ids=lambda t: t.name)
def test_conv_2d_direct_epilogue(cuda_backend, t):
    """An image's first convolution -> [cast] -> + bias over channels -> GELU runs as one conv_2d_direct launch
    that writes the GELU's memory in its type; the values agree with the CPU."""
    rng = np.random.default_rng(4)
    ctx = ggpy.Context()
    k, x, b = (ctx.new_tensor(t, ne).set_input() for ne in ((3, 3, 3, 16), (45, 38, 3, 2), (16,)))
    y = ggpy.conv_2d(k, x, 2, 2, 1, 1, 1, 1)
    out = ggpy.gelu_erf(ggpy.add(y if t == ggpy.F32 else ggpy.cast(y, t), ggpy.reshape_3d(b, 1, 1, 16)))
    graph = ggpy.Graph().build_forward_expand(out.set_output())
    values = [rng.standard_normal(tuple(reversed(v.ne))).astype(np.float32) for v in (k, x, b)]
    results = []
    for be in (cuda_backend, ggpy.CPUBackend(n_threads=2)):
        ggpy.GraphAllocator(be).alloc_graph(graph)
        for leaf, v in zip((k, x, b), values):
            leaf.set(v.astype(t.dtype))
        be.compute(graph)
        results.append(out.numpy().astype(np.float32))
        if be is cuda_backend:
            suffix = "" if t == ggpy.F32 else f"+{t.name}"
            assert [s.name for s in cuda_backend.program(graph)] == [f"conv_2d_direct_{t.name}_{t.name}_{t.name}{suffix}+bias+gelu_erf"]
    np.testing.assert_allclose(results[0], results[1], rtol=2e-2 if t == ggpy.BF16 else 2e-3, atol=2e-2 if t == ggpy.BF16 else 2e-3)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("src,dst", [((256, 256, 3), (1024, 1024)), ((37, 23, 2), (101, 7)), ((50, 40, 1), (17, 29))])
def test_bilinear_matches_the_cpu(cuda_backend, src, dst, align_corners):
    """Bilinear resizing computes taps and weights in float32 as PyTorch does, on both backends (SAM's mask
    upscaling thresholds the result at 0, so the two should agree to rounding)."""
    x = np.random.default_rng(8).standard_normal(tuple(reversed(src))).astype(np.float32)
    outs = []
    for b in (cuda_backend, ggpy.CPUBackend(n_threads=2)):
        ctx = ggpy.Context()
        a = ctx.new_tensor(ggpy.F32, (*src, 1)).set_input()
        y = ggpy.interpolate(a, dst[0], dst[1], src[2], 1, mode="bilinear", align_corners=align_corners)
        graph = ggpy.Graph().build_forward_expand(y.set_output())
        ggpy.GraphAllocator(b).alloc_graph(graph)
        a.set(x.reshape(1, *x.shape))
        b.compute(graph)
        outs.append(y.numpy().reshape(src[2], dst[1], dst[0]))
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=2e-6)
    try:
        import torch
    except ImportError:
        return
    ref = torch.nn.functional.interpolate(torch.from_numpy(x)[None], (dst[1], dst[0]), mode="bilinear",
                                          align_corners=align_corners)[0].numpy()
    np.testing.assert_allclose(outs[1], ref, rtol=0, atol=2e-6)
