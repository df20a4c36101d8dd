"""conv_2d_dw (both implementations, both layouts) and conv_transpose_2d: the op cases on every implementation,
the CWHN result layout, agreement with PyTorch, and build-time errors."""
import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.references import evaluate
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.conv import cases, dw_case, transpose_case

CASES = [c for c in cases() if "perf" not in c.tags]
DW_CASES = [c for c in CASES if c.op == "conv_2d_dw"]
TRANSPOSE_CASES = [c for c in CASES if c.op == "conv_transpose_2d"]


@pytest.mark.parametrize("impl", ["direct", "im2col"])
@pytest.mark.parametrize("case", DW_CASES, ids=[c.id for c in DW_CASES])
def test_conv_2d_dw_impl(case, impl):
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": impl})
    result = run_case(case, backend, seed=3)
    assert result.ok, f"{impl} {case.id}: {result.message}"


@pytest.mark.parametrize("case", DW_CASES[:8], ids=[c.id for c in DW_CASES[:8]])
def test_conv_2d_dw_im2col_tiled(case):
    """A scratch budget of a few pixels' patches: im2col works through many tiles per channel."""
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": "im2col"}, scratch_budget=2 * 7 * 9 * 4)
    result = run_case(case, backend, seed=4)
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("impl", ["gemm", "direct", None])
@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=[c.id for c in TRANSPOSE_CASES])
def test_conv_transpose_2d(case, n_threads, impl):
    force = {"conv_transpose_2d": impl} if impl else None
    result = run_case(case, ggpy.CPUBackend(n_threads=n_threads, force=force), seed=5)
    assert result.ok, f"{impl} {case.id}: {result.message}"


@pytest.mark.parametrize("budget", [4 * 4, 4 * 4 * 37, 1 << 15, 1 << 24])
@pytest.mark.parametrize("ne,k,stride", [((13, 7, 9, 2), (3, 2, 5), 2), ((10, 6, 16, 1), (2, 2, 8), 2),
                                          ((5, 9, 12, 3), (1, 3, 7), 3)])
def test_conv_transpose_2d_gemm_tiled(ne, k, stride, budget):
    """The gemm implementation with scratch for one position's patch up to all of them: channel groups and
    position chunks that end inside rows and images."""
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_transpose_2d": "gemm"}, scratch_budget=budget)
    result = run_case(transpose_case(ne, k, stride), backend, seed=6)
    assert result.ok, result.message


def test_conv_transpose_2d_gemm_strided_input():
    """An input that is a permuted view (channels contiguous) is widened first; a sliced one is read in place."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 11, 7, 6)).astype(np.float32)          # stored (N, H, W, C): C contiguous
    k = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (3, 3, 5, 6)).set_input()
    stored = ctx.new_tensor(ggpy.F32, (6, 7, 11, 2)).set_input()
    b = ggpy.permute(stored, 2, 0, 1, 3)                                 # ne (W, H, C, N) = (7, 11, 6, 2)
    backend = ggpy.CPUBackend(n_threads=2, force={"conv_transpose_2d": "gemm"})
    y = ggpy.conv_transpose_2d(a, b, 2)
    out = _run(y, {a: k, stored: x}, backend)
    ref = evaluate(y, {id(a): k.astype(np.float64), id(stored): x.astype(np.float64)})     # float64 references
    np.testing.assert_allclose(out, ref.reshape(out.shape), rtol=1e-4, atol=1e-4)


def test_large_channels_split_over_threads():
    """Enough work for two workers in every kernel."""
    for impl in ("direct", "im2col"):
        backend = ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": impl})
        for cwhn in (False, True):
            case = dw_case((67, 45, 24, 2), (3, 3), (1, 2), (1, 1), (1, 1), cwhn=cwhn)
            result = run_case(case, backend)
            assert result.ok, f"{impl} {case.id}: {result.message}"
    result = run_case(transpose_case((32, 32, 64, 1), (2, 2, 32), 2), ggpy.CPUBackend(n_threads=2))
    assert result.ok, result.message


def _run(out, inputs, backend=None):
    """Plan and compute the graph of `out` with leaf values {leaf: array of shape reversed(ne)}."""
    backend = backend or ggpy.CPUBackend(n_threads=2)
    graph = ggpy.Graph().build_forward_expand(out.set_output())
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for leaf, values in inputs.items():
        leaf.set(values)
    backend.compute(graph)
    return out.numpy().reshape(tuple(reversed(out.ne)))


def _cwhn_input(ctx, w, h, c, n=1):
    base = ctx.new_tensor(ggpy.F32, (c, w, h, n)).set_input()
    return base, ggpy.permute(base, 2, 0, 1, 3)


def test_cwhn_result_layout_and_chain():
    """A CWHN input gives a CWHN result (strides of a contiguous (C, OW, OH, N) tensor), so a second layer
    sees CWHN again; the chain equals the same chain on WHCN tensors."""
    w, h, c, n = 13, 9, 6, 2
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(n, c, h, w)).astype(np.float32)
    k1 = rng.uniform(-1, 1, size=(c, 1, 3, 3)).astype(np.float32)
    k2 = rng.uniform(-1, 1, size=(c, 1, 5, 3)).astype(np.float32)
    results = {}
    for impl in ("direct", "im2col"):
        for cwhn in (False, True):
            ctx = ggpy.Context()
            a1 = ctx.new_tensor(ggpy.F32, (3, 3, 1, c)).set_input()
            a2 = ctx.new_tensor(ggpy.F32, (3, 5, 1, c)).set_input()
            if cwhn:
                base, b = _cwhn_input(ctx, w, h, c, n)
                values = x.transpose(0, 2, 3, 1)
            else:
                base = b = ctx.new_tensor(ggpy.F32, (w, h, c, n)).set_input()
                values = x
            y1 = ggpy.conv_2d_dw(a1, b, 2, 1, 1, 1)
            y2 = ggpy.conv_2d_dw(a2, y1, 1, 1, 1, 2, 1, 1)
            ow, oh = y1.ne[0], y1.ne[1]
            assert y1.ne == (7, 9, c, n)
            if cwhn:
                assert y1.nb == (4 * c, 4 * c * ow, 4, 4 * c * ow * oh)
                assert y2.nb == (4 * c, 4 * c * y2.ne[0], 4, 4 * c * y2.ne[0] * y2.ne[1])
                assert y1.op_params["cwhn"] and y2.op_params["cwhn"]
            else:
                assert y1.is_contiguous() and y2.is_contiguous()
            results[impl, cwhn] = _run(y2, {base: values, a1: k1, a2: k2},
                                       ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": impl}))
    first = results["direct", False]
    for key, out in results.items():
        np.testing.assert_allclose(out, first, rtol=1e-5, atol=1e-5, err_msg=str(key))


@pytest.fixture(scope="module")
def torch_mod():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("impl", ["direct", "im2col"])
@pytest.mark.parametrize("cwhn", [False, True])
@pytest.mark.parametrize("kernel_type", [ggpy.F32, ggpy.F16])
def test_conv_2d_dw_matches_torch(torch_mod, impl, cwhn, kernel_type):
    tf = torch_mod.nn.functional
    w, h, c, n = 21, 14, 5, 2
    (s0, s1), (p0, p1), (d0, d1) = (2, 1), (1, 2), (1, 2)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    k = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    if kernel_type == ggpy.F16:
        k = k.astype(np.float16).astype(np.float32)
    ctx = ggpy.Context()
    a = ctx.new_tensor(kernel_type, (3, 3, 1, c)).set_input()
    if cwhn:
        base, b = _cwhn_input(ctx, w, h, c, n)
        values = x.transpose(0, 2, 3, 1)
    else:
        base = b = ctx.new_tensor(ggpy.F32, (w, h, c, n)).set_input()
        values = x
    out = _run(ggpy.conv_2d_dw(a, b, s0, s1, p0, p1, d0, d1), {base: values, a: k},
               ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": impl}))
    ref = tf.conv2d(torch_mod.from_numpy(x), torch_mod.from_numpy(k), stride=(s1, s0), padding=(p1, p0),
                    dilation=(d1, d0), groups=c).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,kernel", [(1, 3), (2, 2), (2, 3), (3, 2), (3, 3)])
def test_conv_transpose_2d_matches_torch(torch_mod, stride, kernel):
    w, h, cin, cout, n = 9, 6, 7, 4, 2
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    k = rng.standard_normal((cin, cout, kernel, kernel)).astype(np.float32)
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (kernel, kernel, cout, cin)).set_input()
    b = ctx.new_tensor(ggpy.F32, (w, h, cin, n)).set_input()
    out = _run(ggpy.conv_transpose_2d(a, b, stride), {a: k, b: x})
    ref = torch_mod.nn.functional.conv_transpose2d(torch_mod.from_numpy(x), torch_mod.from_numpy(k),
                                                   stride=stride).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def _leaf(ctx, ne, type_=ggpy.F32):
    return ctx.new_tensor(type_, ne)


@pytest.mark.parametrize("a_ne,b_ne,kwargs,match", [
    ((3, 3, 1, 4), (8, 8, 5, 1), {}, r"a\.ne = \(KW, KH, 1, C\) with C = b\.ne\[2\] = 5"),
    ((3, 3, 2, 4), (8, 8, 4, 1), {}, r"a ne=\(3, 3, 2, 4\)"),
    ((9, 3, 1, 4), (8, 8, 4, 1), {}, r"dilated kernel \(9x3\) is larger than the padded input \(8x8\)"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"d0": 5}, r"dilated kernel \(11x3\)"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"s0": 0}, r"s0 must be an int >= 1, got 0"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"s1": -2}, r"s1 must be an int >= 1"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"d1": 0}, r"d1 must be an int >= 1"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"p0": -1}, r"p0 must be an int >= 0, got -1"),
    ((3, 3, 1, 4), (8, 8, 4, 1), {"s0": 1.5}, r"s0 must be an int >= 1, got 1.5"),
])
def test_conv_2d_dw_build_errors(a_ne, b_ne, kwargs, match):
    ctx = ggpy.Context()
    with pytest.raises(ggpy.ShapeError, match=match) as err:
        ggpy.conv_2d_dw(_leaf(ctx, a_ne), _leaf(ctx, b_ne), **kwargs)
    assert "conv_2d_dw" in str(err.value)


def test_conv_2d_dw_kernel_just_fits_with_padding():
    ctx = ggpy.Context()
    out = ggpy.conv_2d_dw(_leaf(ctx, (10, 3, 1, 4)), _leaf(ctx, (8, 8, 4, 1)), p0=1)
    assert out.ne == (1, 6, 4, 1)


def test_conv_2d_dw_type_errors():
    ctx = ggpy.Context()
    with pytest.raises(ggpy.TypeMismatchError, match=r"conv_2d_dw: 'b' has type i32"):
        ggpy.conv_2d_dw(_leaf(ctx, (3, 3, 1, 4)), _leaf(ctx, (8, 8, 4, 1), ggpy.I32))
    with pytest.raises(ggpy.TypeMismatchError, match=r"conv_2d_dw: argument 'a' must be a ggpy Tensor"):
        ggpy.conv_2d_dw(np.zeros((4, 1, 3, 3)), _leaf(ctx, (8, 8, 4, 1)))


@pytest.mark.parametrize("a_ne,b_ne,stride,match", [
    ((2, 2, 3, 5), (8, 8, 4, 1), 2, r"Cin = b\.ne\[2\] = 4"),
    ((2, 2, 3, 4), (8, 8, 4, 1), 0, r"stride must be an int >= 1, got 0"),
    ((2, 2, 3, 4), (8, 8, 4, 1), -1, r"stride must be an int >= 1, got -1"),
])
def test_conv_transpose_2d_build_errors(a_ne, b_ne, stride, match):
    ctx = ggpy.Context()
    with pytest.raises(ggpy.ShapeError, match=match) as err:
        ggpy.conv_transpose_2d(_leaf(ctx, a_ne), _leaf(ctx, b_ne), stride)
    assert "conv_transpose_2d" in str(err.value)


def test_conv_transpose_2d_type_error():
    ctx = ggpy.Context()
    with pytest.raises(ggpy.TypeMismatchError, match=r"conv_transpose_2d: 'a' has type i32"):
        ggpy.conv_transpose_2d(_leaf(ctx, (2, 2, 3, 4), ggpy.I32), _leaf(ctx, (8, 8, 4, 1)), 2)


def test_sam_upscale_shape():
    ctx = ggpy.Context()
    out = ggpy.conv_transpose_2d(_leaf(ctx, (2, 2, 64, 256)), _leaf(ctx, (64, 64, 256, 1)), 2)
    assert out.ne == (128, 128, 64, 1) and out.type == ggpy.F32


def test_force_unknown_impl():
    with pytest.raises(ggpy.UnsupportedOpError, match="direct, im2col"):
        ggpy.CPUBackend(force={"conv_2d_dw": "winograd"})


def test_kernel_names():
    backend = ggpy.CPUBackend(n_threads=2)
    ctx = ggpy.Context()
    a = _leaf(ctx, (3, 3, 1, 4))
    _, b = _cwhn_input(ctx, 8, 8, 4)
    assert backend.kernel_name(ggpy.conv_2d_dw(a, b)) == "conv_2d_dw_direct_cwhn"
    assert backend.kernel_name(ggpy.conv_2d_dw(a, _leaf(ctx, (8, 8, 4, 1)))) == "conv_2d_dw_direct"
    _, b3 = _cwhn_input(ctx, 8, 8, 3)         # too few channels for the channel-vectorised kernel
    assert backend.kernel_name(ggpy.conv_2d_dw(_leaf(ctx, (3, 3, 1, 3)), b3)) == "conv_2d_dw_direct"
    forced = ggpy.CPUBackend(n_threads=2, force={"conv_2d_dw": "im2col"})
    assert forced.kernel_name(ggpy.conv_2d_dw(a, b)) == "conv_2d_dw_im2col"
