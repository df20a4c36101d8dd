"""The convolution family on the CUDA backend: every test-backend-ops case of im2col, conv_1d, conv_2d,
conv_2d_dw, conv_transpose_2d, pool_2d, upscale and win_part/win_unpart (same float64 references and
tolerances as the CPU). Skips where cuda-python or a GPU is missing."""
from __future__ import annotations

import pytest

import ggpy
from ggpy.test_backend_ops.cases import conv, conv_dw, layout, pool
from ggpy.test_backend_ops.harness import run_case

pytest.importorskip("cuda.bindings.driver")

from ggpy.backends.cuda.kernels import conv as conv_kernels, pool as pool_kernels  # noqa: E402

OPS = conv_kernels.OPS + pool_kernels.OPS
CASES = [c for c in conv.cases() + conv_dw.cases() + pool.cases() + layout.cases() if c.op in OPS]


@pytest.fixture(scope="module")
def backend():
    try:
        return ggpy.backends.make_backend("cuda")
    except ggpy.CudaError as e:
        pytest.skip(f"no usable GPU: {e}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_case(backend, case):
    result = run_case(case, backend)
    assert result.ok, f"{case.id}: {result.message}"


def test_cwhn_result_keeps_its_layout(backend):
    case = conv_dw.dw_case((9, 7, 6, 1), (3, 3), (1, 1), (1, 1), (1, 1), cwhn=True)
    assert backend.kernel_name(case.build(ggpy.Context())) == "conv_2d_dw_cwhn_f32_f32"
    assert run_case(case, backend).ok


def test_large_parameters_are_refused(backend):
    ctx = ggpy.Context()
    node = ggpy.conv_2d(ctx.new_tensor(ggpy.F32, (3, 3, 2, 2)), ctx.new_tensor(ggpy.F32, (300, 8, 2, 1)), p0=256)
    assert not backend.supports_op(node)


CONV_2D = [c for c in conv.cases() if c.op == "conv_2d"]


@pytest.mark.parametrize("case", CONV_2D, ids=lambda c: c.id)
def test_conv_2d_im2col_gemm(backend, case, monkeypatch):
    """conv_2d as im2col bands (a small scratch budget: several bands) + cuBLASLt GEMMs."""
    pytest.importorskip("nvmath")
    monkeypatch.setattr(conv_kernels, "MODE", "im2col")
    monkeypatch.setattr(conv_kernels, "COLS_BUDGET", 4096)
    node = case.build(ggpy.Context())
    assert conv_kernels.uses_im2col(node) == (node.nb[0] == 4 and (node.ne[1] == 1 or node.nb[1] == 4 * node.ne[0]))
    result = run_case(case, backend)
    assert result.ok, f"{case.id}: {result.message}"
