"""pool_2d, upscale and interpolate against PyTorch (skipped without torch), and their build-time errors."""
import numpy as np
import pytest

import ggpy


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


def _run(backend, x, build, type_=ggpy.F32):
    """build(a) evaluated with leaf a holding x (shape (N, C, H, W), i.e. a.ne = (W, H, C, N))."""
    ctx = ggpy.Context()
    a = ctx.new_tensor(type_, tuple(reversed(x.shape))).set_input()
    out = build(a).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(x)
    backend.compute(graph)
    return out.numpy().reshape(tuple(reversed(out.ne))).astype(np.float32)


def _input(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


POOLS = [  # (N, C, H, W), (k0, k1), (s0, s1), (p0, p1); PyTorch takes padding <= kernel // 2
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1)),
    ((1, 2, 11, 6), (2, 3), (1, 2), (1, 1)),
    ((2, 2, 8, 13), (5, 4), (3, 2), (2, 2)),
    ((1, 4, 5, 5), (1, 1), (3, 2), (0, 0)),
    ((1, 3, 20, 17), (4, 2), (2, 3), (0, 1)),
]


@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("shape,k,s,p", POOLS)
def test_pool_2d_matches_torch(backend, op, shape, k, s, p):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = _input(shape)
    out = _run(backend, x, lambda a: ggpy.pool_2d(a, op, k[0], k[1], s[0], s[1], p[0], p[1]))
    t = torch.from_numpy(x)
    kw = {"kernel_size": (k[1], k[0]), "stride": (s[1], s[0]), "padding": (p[1], p[0])}
    ref = F.max_pool2d(t, **kw) if op == "max" else F.avg_pool2d(t, count_include_pad=True, **kw)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-6, atol=1e-6)


def test_pool_2d_f16_input_gives_f32(backend):
    x = _input((1, 2, 6, 7))
    out = _run(backend, x, lambda a: ggpy.pool_2d(a, "max", 2, 2, 2, 2, 0, 0), ggpy.F16)
    x16 = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out, x16[:, :, :6, :6].reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)))


def test_pool_2d_window_all_padding_is_neg_flt_max(backend):
    out = _run(backend, _input((1, 1, 3, 3)), lambda a: ggpy.pool_2d(a, "max", 1, 1, 1, 1, 1, 0))
    assert out[0, 0, 0, 0] == np.finfo(np.float32).min and out[0, 0, 0, -1] == np.finfo(np.float32).min


SIZES = [  # (N, C, H, W) -> (OH, OW)
    ((2, 3, 4, 5), (8, 10)),
    ((1, 2, 5, 7), (11, 17)),
    ((1, 3, 8, 9), (3, 4)),
    ((2, 2, 7, 6), (3, 13)),
    ((1, 2, 3, 1), (1, 5)),
    ((1, 1, 6, 6), (6, 6)),
    ((1, 2, 9, 10), (7, 3)),
    ((1, 1, 7, 3), (21, 9)),
    ((1, 3, 256, 256), (1024, 1024)),      # SAM's mask upscaling: float32 taps and weights as PyTorch
    ((1, 1, 300, 200), (131, 517)),
]
MODES = [("nearest", False), ("bilinear", False), ("bilinear", True)]


@pytest.mark.parametrize("mode,align_corners", MODES)
@pytest.mark.parametrize("shape,size", SIZES)
def test_interpolate_matches_torch(backend, mode, align_corners, shape, size):
    torch = pytest.importorskip("torch")
    x = _input(shape)
    n, c = shape[:2]
    out = _run(backend, x, lambda a: ggpy.interpolate(a, size[1], size[0], c, n, mode, align_corners))
    kw = {} if mode == "nearest" else {"align_corners": align_corners}
    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=mode, **kw)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,align_corners", MODES)
def test_interpolate_size_sweep_matches_torch(backend, mode, align_corners):
    """Every in -> out size pair up to 13 -> 29 in both dims (PyTorch's float index rounding included)."""
    torch = pytest.importorskip("torch")
    kw = {} if mode == "nearest" else {"align_corners": align_corners}
    for n_in in range(1, 14):
        x = _input((1, 1, n_in, n_in), n_in)
        for n_out in range(1, 30):
            out = _run(backend, x, lambda a, n=n_out: ggpy.interpolate(a, n, n, 1, 1, mode, align_corners))
            ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=(n_out, n_out), mode=mode, **kw)
            np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{n_in} -> {n_out}")


# in -> out sizes where nearest's float32 index (PyTorch's floor(i * (in / out))) is below the exact i * in // out
ROUNDING = [(2, 82), (3, 123), (4, 94), (3, 165), (2, 194)]


@pytest.mark.parametrize("n_in,n_out", ROUNDING)
def test_nearest_rounds_as_torch(backend, n_in, n_out):
    torch = pytest.importorskip("torch")
    x = _input((1, 1, n_in, n_in), n_in)
    exact = [i * n_in // n_out for i in range(n_out)]
    scale = np.float32(n_in) / np.float32(n_out)
    assert exact != [min(int(np.floor(np.float32(i) * scale)), n_in - 1) for i in range(n_out)]
    out = _run(backend, x, lambda a: ggpy.interpolate(a, n_out, n_out, 1, 1, "nearest"))
    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=(n_out, n_out), mode="nearest")
    np.testing.assert_array_equal(out, ref.numpy())


@pytest.mark.parametrize("mode,align_corners", MODES)
@pytest.mark.parametrize("f", [1, 2, 3])
def test_upscale_matches_torch(backend, mode, align_corners, f):
    torch = pytest.importorskip("torch")
    x = _input((2, 3, 5, 4))
    out = _run(backend, x, lambda a: ggpy.upscale(a, f, mode, align_corners))
    kw = {} if mode == "nearest" else {"align_corners": align_corners}
    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=(5 * f, 4 * f), mode=mode, **kw)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_interpolate_nearest_over_dims_2_and_3(backend):
    x = _input((2, 3, 2, 2))
    out = _run(backend, x, lambda a: ggpy.interpolate(a, 2, 2, 5, 3, "nearest"))
    np.testing.assert_array_equal(out, x[[0, 0, 1]][:, [0, 0, 1, 1, 2]])


def test_shapes_and_types():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F16, (10, 9, 3, 2))
    p = ggpy.pool_2d(a, "avg", 3, 2, 2, 3, 1, 0)
    assert p.ne == (5, 3, 3, 2) and p.type == ggpy.F32
    u = ggpy.upscale(a, 3)
    assert u.ne == (30, 27, 3, 2) and u.type == ggpy.F16 and u.op == "upscale"
    assert ggpy.interpolate(a, 4, 1, 6, 1, "bilinear", align_corners=True).ne == (4, 1, 6, 1)


@pytest.mark.parametrize("args,match", [
    (("max", 6, 2, 1, 1, 0, 0), r"kernel 6x2 is larger than the padded input 5x4"),
    (("avg", 2, 7, 1, 1, 1, 1), r"kernel 2x7 is larger than the padded input 7x6"),
    (("max", 2, 2, 0, 1, 0, 0), r"s0 must be an int >= 1, got 0"),
    (("max", 2, 2, 1, -1, 0, 0), r"s1 must be an int >= 1, got -1"),
    (("max", 2, 2, 1, 1, -1, 0), r"p0 must be an int >= 0, got -1"),
    (("avg", 0, 2, 1, 1, 0, 0), r"k0 must be an int >= 1, got 0"),
    (("avg", 2, 2, 1.5, 1, 0, 0), r"s0 must be an int >= 1, got 1.5"),
    (("min", 2, 2, 1, 1, 0, 0), r"op must be one of \('max', 'avg'\), got 'min'"),
])
def test_pool_2d_errors(args, match):
    a = ggpy.Context().new_tensor(ggpy.F32, (5, 4, 2, 1))
    with pytest.raises(ggpy.ShapeError, match=rf"pool_2d: {match}.*ne=\(5, 4, 2, 1\)"):
        ggpy.pool_2d(a, *args)


@pytest.mark.parametrize("call,match", [
    (lambda a: ggpy.interpolate(a, 0, 4, 2, 1), r"interpolate: ne0 must be an int >= 1, got 0"),
    (lambda a: ggpy.interpolate(a, 5, 4, 2, -1), r"interpolate: ne3 must be an int >= 1, got -1"),
    (lambda a: ggpy.interpolate(a, 5, 4, 2, 1, "bicubic"), r"interpolate: mode must be one of .*'bicubic'"),
    (lambda a: ggpy.interpolate(a, 5, 4, 2, 1, "nearest", True), r"align_corners needs mode 'bilinear'"),
    (lambda a: ggpy.upscale(a, 0), r"upscale: scale_factor must be an int >= 1, got 0"),
    (lambda a: ggpy.upscale(a, 1.5), r"upscale: scale_factor must be an int >= 1, got 1.5"),
])
def test_interpolate_errors(call, match):
    a = ggpy.Context().new_tensor(ggpy.F32, (5, 4, 2, 1))
    with pytest.raises(ggpy.ShapeError, match=match):
        call(a)


def test_type_errors():
    ctx = ggpy.Context()
    with pytest.raises(ggpy.TypeMismatchError, match="pool_2d: 'a' has type i32"):
        ggpy.pool_2d(ctx.new_tensor(ggpy.I32, (5, 4)), "max", 2, 2, 1, 1)
    with pytest.raises(ggpy.TypeMismatchError, match="upscale: argument 'a' must be a ggpy Tensor"):
        ggpy.upscale(np.zeros((4, 4)), 2)
