"""CPU fusion of mul_mat / conv_2d_dw -> add(bias) [-> activation]: same results as float64 numpy, fused or
not."""
import math

import numpy as np
import pytest

import ggpy
from ggpy.backends.kernel import Fused
from ggpy.graph.fusion import find_fusions

FUSE = True
ERF = np.vectorize(math.erf)
ACTS = {None: lambda u: u, "gelu_erf": lambda u: 0.5 * u * (1 + ERF(u / np.sqrt(2))),
        "relu": lambda u: np.maximum(u, 0), "silu": lambda u: u / (1 + np.exp(-u))}


def runs(*patterns, **variant):
    """A stand-in backend's answer to the fusion pass: it runs `patterns` anchored at any node, as Fused(**variant)."""
    spec = Fused(run=None, **variant)
    return lambda node, pattern: spec if pattern in patterns else None


def _run(build, fuse, rng, n_threads=2):
    ctx = ggpy.Context()
    inputs, out = build(ctx)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=n_threads, fuse=fuse)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    values = [rng.standard_normal(tuple(reversed(t.ne))).astype(np.float32) for t in inputs]
    for t, v in zip(inputs, values):
        t.set(v)
    backend.compute(graph)
    names = [step.name for step in backend.program(graph)]
    return out.numpy(), [v.squeeze() for v in values], names, graph


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("wtype", [ggpy.F32, ggpy.F16])
def test_matmul_bias_act(act, batch, wtype):
    k, m, n = 37, 29, 300

    def build(ctx):
        w = ctx.new_tensor(wtype, (k, m)).set_input()
        x = ctx.new_tensor(ggpy.F32, (k, n, batch)).set_input()
        b = ctx.new_tensor(ggpy.F32, (m,)).set_input()
        y = ggpy.add(ggpy.mul_mat(w, x), b)
        return [w, x, b], getattr(ggpy, act)(y) if act else y
    rng = np.random.default_rng(3)
    out, (w, x, b), names, _ = _run(build, True, rng)
    if wtype == ggpy.F16:
        w = w.astype(np.float16)
    ref = ACTS[act](x.astype(np.float64) @ w.astype(np.float64).T + b)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=2e-5, atol=2e-5)
    head = "blas_sgemm" + ("+to_f32" if wtype == ggpy.F16 else "")
    assert names == [head + "+bias" + (f"+{act}" if act else "")]


def test_not_fused_when_intermediate_is_read_twice():
    def build(ctx):
        w = ctx.new_tensor(ggpy.F32, (16, 8)).set_input()
        x = ctx.new_tensor(ggpy.F32, (16, 40)).set_input()
        b = ctx.new_tensor(ggpy.F32, (8,)).set_input()
        y = ggpy.add(ggpy.mul_mat(w, x), b)
        return [w, x, b], ggpy.mul(ggpy.gelu_erf(y), y)
    rng = np.random.default_rng(4)
    out, (w, x, b), names, graph = _run(build, True, rng)
    y = x.astype(np.float64) @ w.T + b
    np.testing.assert_allclose(out, ACTS["gelu_erf"](y) * y, rtol=2e-5, atol=2e-5)
    assert names[:2] == ["blas_sgemm+bias", "gelu_erf"]
    assert len(find_fusions(graph, runs("epilogue", act=True))) == 1


def test_chain_fused_equals_unfused():
    """A stack of linear layers whose buffers get reused: fused and unfused runs agree to float32 rounding (bit for bit
    on the AVX-512 hosts CI ran on; on an AVX2 host 7% of the elements differed in the last bits, at most 1.9e-4
    relative after four layers, where a block read after reuse would be off entirely)."""
    def build(ctx):
        x = ctx.new_tensor(ggpy.F32, (24, 700)).set_input()
        ts, h = [x], x
        for _i in range(4):
            w = ctx.new_tensor(ggpy.F32, (24, 24)).set_input()
            b = ctx.new_tensor(ggpy.F32, (24,)).set_input()
            ts += [w, b]
            h = ggpy.gelu_erf(ggpy.add(ggpy.mul_mat(w, h), b))
        return ts, h
    fused = _run(build, True, np.random.default_rng(5))[0]
    plain = _run(build, False, np.random.default_rng(5))[0]
    np.testing.assert_allclose(fused, plain, rtol=1e-3, atol=1e-3)


def test_bias_computed_after_the_matmul_is_not_fused():
    def build(ctx):
        w = ctx.new_tensor(ggpy.F32, (16, 8)).set_input()
        x = ctx.new_tensor(ggpy.F32, (16, 40)).set_input()
        b = ctx.new_tensor(ggpy.F32, (8,)).set_input()
        mm = ggpy.mul_mat(w, x)
        return [w, x, b], ggpy.add(mm, ggpy.sigmoid(b))     # sigmoid(b) comes after mm in graph order
    out, (w, x, b), names, graph = _run(build, True, np.random.default_rng(6))
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T + 1 / (1 + np.exp(-b.astype(np.float64))),
                               rtol=2e-5, atol=2e-5)
    assert find_fusions(graph, runs("epilogue", act=True)) == {}


@pytest.mark.parametrize("act", [None, "gelu_erf"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_cwhn_bias_act(act, stride):
    """Tokens (C, W, H) -> depthwise 3x3 in the channels-contiguous layout -> back to tokens -> + bias -> act."""
    c, w, h = 19, 13, 11

    def build(ctx):
        k = ctx.new_tensor(ggpy.F32, (3, 3, 1, c)).set_input()
        t = ctx.new_tensor(ggpy.F32, (c, w, h, 1)).set_input()
        b = ctx.new_tensor(ggpy.F32, (c,)).set_input()
        y = ggpy.conv_2d_dw(k, ggpy.permute(t, 2, 0, 1, 3), stride, stride, 1, 1, 1, 1)
        tokens = ggpy.permute(y, 1, 2, 0, 3)
        y = ggpy.add(ggpy.reshape_3d(tokens, tokens.ne[0], tokens.ne[1], tokens.ne[2]), b)
        return [k, t, b], getattr(ggpy, act)(y) if act else y
    out, (k, t, b), names, _ = _run(build, FUSE, np.random.default_rng(7))
    x = np.pad(t.astype(np.float64), ((1, 1), (1, 1), (0, 0)))                 # (H, W, C) padded
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    ref = np.zeros((oh, ow, c))
    for ky in range(3):
        for kx in range(3):
            ref += x[ky:ky + stride * oh:stride, kx:kx + stride * ow:stride] * k[:, ky, kx]
    ref = ACTS[act](ref + b)
    np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=2e-5, atol=2e-5)
    assert names == ["conv_2d_dw_direct_cwhn+bias" + (f"+{act}" if act else "")]
    plain = _run(build, False, np.random.default_rng(7))
    np.testing.assert_allclose(out, plain[0], rtol=1e-6, atol=1e-6)      # the fused kernel starts from the bias


@pytest.mark.parametrize("act", [None, "gelu_erf"])
def test_layer_norm_affine(act):
    """norm -> mul(weight) -> add(bias) [-> act] as one kernel, in place over its input when planned so."""
    def build(ctx):
        x = ctx.new_tensor(ggpy.F32, (48, 33, 2)).set_input()
        w = ctx.new_tensor(ggpy.F32, (48,)).set_input()
        b = ctx.new_tensor(ggpy.F32, (48,)).set_input()
        h = ggpy.scale(x, 2.0)                         # an intermediate the norm may take over
        y = ggpy.add(ggpy.mul(ggpy.norm(h, 1e-5), w), b)
        return [x, w, b], getattr(ggpy, act)(y) if act else y
    out, (x, w, b), names, _ = _run(build, True, np.random.default_rng(8))
    h = 2.0 * x.astype(np.float64)
    ref = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out.reshape(ref.shape), ACTS[act](ref), rtol=2e-5, atol=2e-5)
    assert names[1] == "norm+scale+bias" + (f"+{act}" if act else "")


def test_fusions_found_again_when_an_intermediate_becomes_an_output():
    """The fusions are cached per graph version and outputs: marking the GEMM's result as an output after a
    first plan unfuses it in the next plan, and its value is then kept."""
    rng = np.random.default_rng(11)
    ctx = ggpy.Context()
    w, x, b = (ctx.new_tensor(ggpy.F32, ne).set_input() for ne in ((16, 8), (16, 40), (8,)))
    y = ggpy.mul_mat(w, x)
    out = ggpy.add(y, b)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert [step.name for step in backend.program(graph)] == ["blas_sgemm+bias"]
    y.set_output()
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert [step.name for step in backend.program(graph)] == ["blas_sgemm", "add"]
    values = [rng.standard_normal(tuple(reversed(t.ne))).astype(np.float32) for t in (w, x, b)]
    for t, v in zip((w, x, b), values):
        t.set(v)
    backend.compute(graph)
    wv, xv, bv = (v.squeeze().astype(np.float64) for v in values)
    ref = xv @ wv.T
    np.testing.assert_allclose(y.numpy().reshape(ref.shape), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy().reshape(ref.shape), ref + bv, rtol=1e-4, atol=1e-4)


def test_fusion_pass_chains():
    """Maximal elementwise runs, each node the only reader of the one before; a node read twice, an output or
    a node taken by an epilogue ends the run; chains only when the backend asks (chain=)."""
    from ggpy.graph.fusion import Chain
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (8, 4)).set_input()
    w = ctx.new_tensor(ggpy.F32, (8, 6)).set_input()
    b = ctx.new_tensor(ggpy.F32, (6,)).set_input()
    h = ggpy.gelu_erf(ggpy.add(ggpy.mul_mat(w, x), b))          # an epilogue (mul_mat + bias), then gelu alone
    s = ggpy.scale(h, 2.0)
    t = ggpy.tanh(ggpy.sub(s, ggpy.sqr(s)))                      # s read twice: ends a run
    out = ggpy.cast(ggpy.exp(t), ggpy.F16)
    graph = ggpy.Graph().build_forward_expand(out)
    found = find_fusions(graph, runs("epilogue", "chain"))
    chains = sorted(f.name() for f in found.values() if isinstance(f, Chain))
    assert chains == ["fused:gelu_erf+scale", "fused:sub+tanh+exp+cast"]
    assert not any(isinstance(f, Chain) for f in find_fusions(graph, runs("epilogue", act=True)).values())


@pytest.mark.parametrize("bias_shape", ["channels", "row"])
def test_fusion_pass_conv_2d_channel_bias(bias_shape):
    """An image convolution's epilogue adds its bias over ne[2] (the channels of (W, H, C, N)): conv_2d -> cast ->
    add(bias reshaped to (1, 1, C)) -> GELU is one Epilogue; a bias over ne[0] (a row vector) is not."""
    from ggpy.graph.fusion import Epilogue
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F16, (12, 12, 3, 2)).set_input()
    k = ctx.new_tensor(ggpy.F16, (3, 3, 3, 12)).set_input()
    b = ctx.new_tensor(ggpy.F16, (12,) if bias_shape == "channels" else (6,)).set_input()
    y = ggpy.cast(ggpy.conv_2d(k, x, 2, 2, 1, 1, 1, 1), ggpy.F16)        # ne = (6, 6, 12, 2)
    bias = ggpy.reshape_3d(b, 1, 1, 12) if bias_shape == "channels" else b
    out = ggpy.gelu_erf(ggpy.add(y, bias))
    graph = ggpy.Graph().build_forward_expand(out)
    fusions = list(find_fusions(graph, runs("epilogue", act=True, cast=True)).values())
    if bias_shape == "row":
        assert fusions == []
        return
    (f,) = fusions
    assert isinstance(f, Epilogue) and f.head.op == "conv_2d" and f.bias is bias and f.last is out
    assert f.name("conv") == "conv+f16+bias+gelu_erf"


def test_fusion_pass_waits_for_a_write_into_a_leaf():
    """A bias read through a view of set_rows' result (a KV cache leaf written by the graph) is ready only after the
    write: the GEMM before it does not take the add as its epilogue (it would read the cache before the write)."""
    ctx = ggpy.Context()
    cache = ctx.new_tensor(ggpy.F32, (6, 4)).set_input()
    rows = ctx.new_tensor(ggpy.F32, (6, 1)).set_input()
    idx = ctx.new_tensor(ggpy.I32, (1,)).set_input()
    w, x = ctx.new_tensor(ggpy.F32, (8, 6)).set_input(), ctx.new_tensor(ggpy.F32, (8, 3)).set_input()
    y = ggpy.mul_mat(w, x)                                             # ne = (6, 3), before the write
    written = ggpy.set_rows(cache, rows, idx)
    out = ggpy.add(y, ggpy.view_1d(written, 6, 0))                     # cache row 0 as a bias, after the write
    graph = ggpy.Graph().build_forward_expand(out)
    order = [n.op for n in graph.nodes]
    assert order.index("mul_mat") < order.index("set_rows") < order.index("add")
    assert find_fusions(graph, runs("epilogue", act=True)) == {}


@pytest.mark.parametrize("v_batch,found", [(1, True), (3, False)])
def test_cross_attention_pattern(v_batch, found):
    """The attention pattern takes cross-attention: 7 queries of 3 prompts over 50 keys shared by the prompts
    (k, v broadcast as mul_mat's); values that do not broadcast like the keys are not the pattern."""
    hd, heads = 16, 2
    ctx = ggpy.Context()
    q = ctx.new_tensor(ggpy.F32, (hd, 7, heads, 3))
    k = ctx.new_tensor(ggpy.F32, (hd, 50, heads, 1))
    v_t = ctx.new_tensor(ggpy.F32, (50, hd, heads, v_batch))
    p = ggpy.soft_max_ext(ggpy.mul_mat(k, q), None, 0.25)
    out = ggpy.cont(ggpy.permute(ggpy.mul_mat(v_t, p), 0, 2, 1, 3))
    graph = ggpy.Graph().build_forward_expand(out)
    fusions = find_fusions(graph, runs("attention"))
    head = next(n for n in graph.nodes if n.op == "mul_mat")
    assert (id(head) in fusions) == found
    if found:
        f = fusions[id(head)]
        assert (f.q, f.k, f.v, f.cont) == (q, k, v_t, out) and f.nodes[-1] is out


def _leafs(ctx, *shapes, t=ggpy.F32):
    return [ctx.new_tensor(t, ne).set_input() for ne in shapes]


def _found(out, *patterns, **variant):
    graph = ggpy.Graph().build_forward_expand(out)
    return list(find_fusions(graph, runs(*patterns, **variant)).values())


@pytest.mark.parametrize("weight", ["row", "full", "later"])
def test_rms_norm_mul_pattern(weight):
    """rms_norm -> mul by a row vector ready at the norm's turn is one RmsNormMul (the mul takes the norm's block); a
    full-shape operand or a weight computed after the norm is not the pattern."""
    ctx = ggpy.Context()
    x, w, full = _leafs(ctx, (32, 3), (32,), (32, 3))
    norm = ggpy.rms_norm(x, 1e-6)
    operand = {"row": w, "full": full, "later": ggpy.scale(w, 2.0)}[weight]
    out = ggpy.mul(norm, operand)
    found = _found(out, "rms_norm_mul")
    if weight != "row":
        assert found == []
        return
    (f,) = found
    assert (f.pattern, f.head, f.weight, f.last, f.nodes) == ("rms_norm_mul", norm, w, out, [norm, out])
    assert f.name("rms_norm") == "rms_norm+mul"


@pytest.mark.parametrize("scale", [True, False])
def test_add_rms_norm_takes_the_weight_with_scale(scale):
    """add -> rms_norm -> mul(weight): with Fused.scale the mul rides along (written at the add's turn, the sum kept for
    its other reader); without, the pair only, and the mul stays a node of its own."""
    ctx = ggpy.Context()
    a, b, w = _leafs(ctx, (16, 2), (16, 2), (16,))
    total = ggpy.add(a, b)
    y = ggpy.mul(ggpy.rms_norm(total, 1e-5), w)
    out = ggpy.add(total, y)                 # the residual stream reads the sum again
    (f,) = _found(out, "add_rms_norm", scale=scale)
    assert f.head is total and f.nodes == [total]
    assert [n.op for n in f.computed] == ["add", "rms_norm"] + (["mul"] if scale else [])
    assert f.last is (y if scale else f.norm) and f.weight is (w if scale else None)


def test_add_rms_norm_mul_not_taken_across_a_node():
    """The mul must come right after the norm (views aside): a node between would run after the fused write."""
    ctx = ggpy.Context()
    a, b, w = _leafs(ctx, (16, 2), (16, 2), (16,))
    norm = ggpy.rms_norm(ggpy.add(a, b), 1e-5)
    graph = ggpy.Graph().build_forward_expand(norm)
    graph.build_forward_expand(ggpy.sqr(b))
    graph.build_forward_expand(ggpy.mul(norm, w))
    assert [n.op for n in graph.nodes] == ["add", "rms_norm", "sqr", "mul"]
    (f,) = find_fusions(graph, runs("add_rms_norm", scale=True)).values()
    assert f.mul is None and f.last is norm


@pytest.mark.parametrize("order", ["gate_first", "up_first"])
def test_glu_pattern(order):
    """gate and up products of one x, silu(gate) * up: one Glu headed by whichever product comes first, whose four
    nodes get one block."""
    ctx = ggpy.Context()
    x, wg, wu = _leafs(ctx, (24, 1), (24, 40), (24, 40))
    if order == "gate_first":
        gate = ggpy.mul_mat(wg, x)
        out = ggpy.mul(ggpy.silu(gate), ggpy.mul_mat(wu, x))
    else:
        up = ggpy.mul_mat(wu, x)
        gate = ggpy.mul_mat(wg, x)
        out = ggpy.mul(up, ggpy.silu(gate))
    (f,) = _found(out, "glu")
    graph_order = list(ggpy.Graph().build_forward_expand(out).nodes)
    assert f.pattern == "glu" and f.head is graph_order[0] and f.gate is gate and f.last is out
    assert (f.x, f.w_gate, f.w_up, f.act) == (x, wg, wu, "silu")
    assert f.nodes == graph_order and f.skipped == graph_order[1:]


@pytest.mark.parametrize("case", ["two_inputs", "gate_read_twice", "shape"])
def test_glu_pattern_refused(case):
    """Not a Glu: products of different inputs, a gate read by another node, a mul that broadcasts."""
    ctx = ggpy.Context()
    x, x2, wg, wu, wv = _leafs(ctx, (24, 3), (24, 3), (24, 40), (24, 40), (24, 1))
    gate = ggpy.mul_mat(wg, x)
    up = ggpy.mul_mat(wu, x2 if case == "two_inputs" else x)
    if case == "shape":
        up = ggpy.mul_mat(wv, x)              # ne = (1, 3): broadcast over the gate's rows
    out = ggpy.mul(ggpy.silu(gate), up)
    if case == "gate_read_twice":
        out = ggpy.add(out, gate)
    assert _found(out, "glu") == []


@pytest.mark.parametrize("order", ["residual_first", "product_first", "reshaped"])
def test_mul_mat_add_pattern(order):
    """mul_mat -> add of a residual of its shape (either operand order, through a same-order reshape): one MatMulAdd
    whose add takes the product's block."""
    ctx = ggpy.Context()
    w, x, r = _leafs(ctx, (32, 48), (32, 2), (48, 2))
    y = ggpy.mul_mat(w, x)
    if order == "reshaped":
        r3 = ggpy.reshape_3d(r, 16, 3, 2)
        out = ggpy.add(ggpy.reshape_3d(y, 16, 3, 2), r3)
    else:
        out = ggpy.add(r, y) if order == "residual_first" else ggpy.add(y, r)
    (f,) = _found(out, "mul_mat_add")
    assert f.pattern == "mul_mat_add" and f.head is y and f.last is out and f.nodes == [y, out]
    assert f.residual is (r3 if order == "reshaped" else r)
    assert f.name("q8_q4_0") == "q8_q4_0+add"


@pytest.mark.parametrize("case", ["bias", "later", "read_twice"])
def test_mul_mat_add_pattern_refused(case):
    """Not a MatMulAdd: a broadcast bias (the epilogue's), a residual computed after the product, a product read
    again."""
    ctx = ggpy.Context()
    w, x, r, b = _leafs(ctx, (32, 48), (32, 2), (48, 2), (48,))
    y = ggpy.mul_mat(w, x)
    out = {"bias": lambda: ggpy.add(y, b), "later": lambda: ggpy.add(y, ggpy.sqr(r)),
           "read_twice": lambda: ggpy.mul(ggpy.add(r, y), y)}[case]()
    assert _found(out, "mul_mat_add") == []


def _kv_write(ctx, n=1, between=False, read_again=False):
    """A llama k path: rope(k) -> reshape_2d -> set_rows into a cache at the positions (and the attention reading the
    cache through a view after the write)."""
    k, pos, cache = ctx.new_tensor(ggpy.F32, (8, 2, n)), ctx.new_tensor(ggpy.I32, (n,)), ctx.new_tensor(ggpy.F16, (16, 10))
    for t in (k, pos, cache):
        t.set_input()
    r = ggpy.rope_ext(k, pos, None, 8, 0, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
    rows = ggpy.reshape_2d(r, 16, n)
    if between:
        rows = ggpy.reshape_2d(ggpy.scale(r, 1.0), 16, n)      # a node between the rope and the write
    written = ggpy.set_rows(cache, rows, pos)
    out = ggpy.sum(ggpy.view_2d(written, 16, 4, written.nb[1], 0))
    if read_again:
        out = ggpy.add(out, ggpy.sum(r))
    return r, rows, written, out, pos, cache


@pytest.mark.parametrize("n", [1, 3])
def test_rope_set_rows_pattern(n):
    ctx = ggpy.Context()
    r, rows, written, out, pos, cache = _kv_write(ctx, n)
    (f,) = _found(out, "rope_set_rows")
    assert f.pattern == "rope_set_rows" and f.head is r and f.last is written and f.views == (rows,)
    assert (f.rows, f.idx, f.dst) == (rows, pos, cache)
    assert f.nodes == [r] and f.computed == [r, written] and f.skipped == [rows, written]


@pytest.mark.parametrize("case", ["between", "read_again"])
def test_rope_set_rows_refused(case):
    """A node between the rope and the write, or the rotated rows read by another node: not the pattern."""
    ctx = ggpy.Context()
    out = _kv_write(ctx, 2, between=case == "between", read_again=case == "read_again")[3]
    assert _found(out, "rope_set_rows") == []


def test_glu_pattern_needs_its_nodes_in_graph_order():
    """gate, up, silu, mul in that graph order: the run the planner would give one block is not in graph order."""
    ctx = ggpy.Context()
    x, wg, wu = _leafs(ctx, (24, 1), (24, 40), (24, 40))
    gate, up = ggpy.mul_mat(wg, x), ggpy.mul_mat(wu, x)
    graph = ggpy.Graph().build_forward_expand(gate)
    graph.build_forward_expand(up)
    graph.build_forward_expand(ggpy.mul(ggpy.silu(gate), up))
    assert [n.op for n in graph.nodes] == ["mul_mat", "mul_mat", "silu", "mul"]
    assert find_fusions(graph, runs("glu")) == {}


def test_rope_set_rows_index_out_of_range():
    """The fused KV write refuses a row index outside the cache as set_rows does (RowIndexError naming the node)."""
    ctx = ggpy.Context()
    r, rows, written, out, pos, cache = _kv_write(ctx, 2)
    written.set_name("k_store")
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=1)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert "rope+set_rows" in [step.name for step in backend.program(graph)]
    r.src[0].set(np.ones((2, 2, 8), np.float32))
    cache.set(np.zeros((10, 16), np.float16))
    pos.set(np.array([3, 10], np.int32))
    with pytest.raises(ggpy.errors.RowIndexError, match="k_store"):
        backend.compute(graph)
