"""conv_2d on cuDNN (ggpy/backends/cuda/cudnn_conv.py): forced on the conv family's cases and on F32 (with and
without TF32), F16 and BF16 operands against float64 references, refusals falling back to the default
implementation, CUDA-graph replay, and the autotune timing the cudnn candidate. Skips without cuda-python, a GPU or
cuDNN's Python frontend (nvidia-cudnn-frontend with a loadable libcudnn)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.cases import conv
from ggpy.test_backend_ops.cases.util import layout, leaf
from ggpy.test_backend_ops.harness import OpCase, run_case

pytest.importorskip("cuda.bindings.driver")

from ggpy.backends.cuda import CUDABackend, autotune, cudnn_conv  # noqa: E402
from ggpy.backends.cuda.kernels import conv as conv_kernels  # noqa: E402
from ggpy.backends.cuda.registry import KERNELS  # noqa: E402


def _backend(**kw):
    """CUDABackend("cuda", **kw), once the cuda_backend fixture has found a GPU; skips without cuDNN."""
    if cudnn_conv.frontend() is None:
        pytest.skip("cuDNN's Python frontend (nvidia-cudnn-frontend) is not installed or libcudnn does not load")
    return CUDABackend("cuda", **kw)


@pytest.fixture(scope="module")
def forced(cuda_backend):
    return _backend(force={"conv_2d": "cudnn"})


@pytest.fixture(scope="module")
def forced_tf32(cuda_backend):
    return _backend(force={"conv_2d": "cudnn"}, allow_tf32=True)


def _names(backend, case) -> list:
    """The step names of the case's node alone, planned on `backend`."""
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()).set_output())
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    return [st.name for st in backend.program(graph)]


CONV_2D = [c for c in conv.cases() if c.op == "conv_2d"]


@pytest.mark.parametrize("case", CONV_2D, ids=lambda c: c.id)
def test_conv_family_cases(forced, case):
    """Every conv_2d case of the family (F32/F16 kernels, four layouts, strides, paddings, dilations, batches): cuDNN
    runs the contiguous ones, and every one is correct (a refused one on choose()'s implementation)."""
    why = cudnn_conv.refusal(case.build(ggpy.Context()))
    if "b=cont" in case.params:
        assert why is None, f"{case.id}: cuDNN refused a contiguous conv: {why}"
    assert any(n.startswith("cudnn_conv") for n in _names(forced, case)) == (why is None), why
    result = run_case(case, forced)
    assert result.ok, f"{case.id} ({'cuDNN' if why is None else 'fallback: ' + why}): {result.message}"


SHAPES = [  # (W, H, Cin, Cout, N, KW, KH, s0, s1, p0, p1, d0, d1)
    (20, 18, 16, 24, 1, 3, 3, 1, 1, 1, 1, 1, 1),
    (33, 17, 8, 16, 2, 3, 3, 2, 2, 1, 1, 1, 1),       # stride 2, batch 2
    (19, 23, 12, 8, 1, 5, 3, 1, 2, 2, 0, 1, 1),       # non-square kernel, asymmetric padding and stride
    (24, 20, 8, 8, 2, 3, 3, 1, 1, 2, 2, 2, 2),        # dilation 2
    (16, 16, 32, 64, 1, 1, 1, 1, 1, 0, 0, 1, 1),      # 1x1
]
TYPES = [(ggpy.F32, False, 5e-7), (ggpy.F32, True, 2e-5), (ggpy.F16, False, 2e-5), (ggpy.BF16, False, 2e-4)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("t,tf32,nmse", TYPES, ids=["f32", "f32-tf32", "f16", "bf16"])
def test_types(forced, forced_tf32, t, tf32, nmse, shape):
    """a and b both F32 (TF32 only with allow_tf32), F16 or BF16: cuDNN in that type, the F32 result within nmse."""
    case = dataclasses.replace(conv._conv_2d(t, "cont", *shape, tb=t), max_nmse=nmse)
    backend = forced_tf32 if tf32 else forced
    why = cudnn_conv.refusal(case.build(ggpy.Context()))
    assert why is None, f"{case.id}: {why}"
    names = _names(backend, case)
    assert f"cudnn_conv_{t.name.lower()}_{t.name.lower()}" + ("_tf32" if tf32 else "") in names, names
    result = run_case(case, backend)
    assert result.ok, f"{case.id} tf32={tf32} steps {names}: {result.message}"


def _offset_image(ctx):
    """A (20, 18, 16, 1) F32 image 4 bytes into a wider leaf: not 16-byte aligned."""
    base = leaf(ctx, ggpy.F32, (21, 18, 16, 1))
    return ggpy.view_4d(base, 20, 18, 16, 1, base.nb[1], base.nb[2], base.nb[3], 4)


def test_refusals_fall_back(forced, monkeypatch):
    """A node cuDNN refuses (simulated: every build raises) and a misaligned view run choose()'s implementation
    under force={"conv_2d": "cudnn"}, with its temp block, and stay correct."""
    case = conv._conv_2d(ggpy.F32, "cont", *SHAPES[0])
    misaligned = OpCase("conv_2d", "misaligned image", lambda ctx: ggpy.conv_2d(
        layout(ctx, ggpy.F32, (3, 3, 16, 24)), _offset_image(ctx), 1, 1, 1, 1, 1, 1), max_nmse=5e-7)
    assert "aligned" in cudnn_conv.refusal(misaligned.build(ggpy.Context()))

    def refuse(*args):
        raise RuntimeError("CUDNN_STATUS_BAD_PARAM (simulated)")
    monkeypatch.setattr(cudnn_conv, "_PLANS", {})
    monkeypatch.setattr(cudnn_conv, "_build", refuse)
    assert "simulated" in cudnn_conv.refusal(case.build(ggpy.Context()))
    for c in (case, misaligned):
        node = c.build(ggpy.Context())
        entry = KERNELS["conv_2d"]
        assert entry.temp_size(node, "cudnn", None) == entry.temp_size(node, conv_kernels.choose(node, None), None)
        assert not any(n.startswith("cudnn") for n in _names(forced, c))
        result = run_case(c, forced)
        assert result.ok, f"{c.id}: {result.message}"


def test_cuda_graph_replay(forced):
    """The cuDNN step is captured into the plan's CUDA graph; a replay on new inputs gives their result."""
    ctx = ggpy.Context()
    k, x = ctx.new_tensor(ggpy.F32, (3, 3, 8, 16)).set_input(), ctx.new_tensor(ggpy.F32, (15, 13, 8, 2)).set_input()
    y = ggpy.conv_2d(k, x, 2, 1, 1, 1, 1, 1).set_output()
    graph = ggpy.Graph().build_forward_expand(y)
    ggpy.GraphAllocator(forced).alloc_graph(graph)
    assert any(st.name == "cudnn_conv_f32_f32" for st in forced.program(graph))
    rng = np.random.default_rng(5)
    for _ in range(3):
        kv, xv = rng.standard_normal(k.shape).astype(np.float32), rng.standard_normal(x.shape).astype(np.float32)
        k.set(kv)
        x.set(xv)
        forced.compute(graph)
        xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        ref = np.zeros(y.shape)
        for i in range(3):
            for j in range(3):
                ref += np.einsum("nchw,oc->nohw", xp[:, :, i:i + y.ne[1], j:j + 2 * y.ne[0] - 1:2], kv[:, :, i, j])
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)
    assert forced.cuda_graph(graph) is not None, "the plan was not captured as a CUDA graph"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GGPY_AUTOTUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(autotune.WINNERS, "memory", {})


@pytest.mark.parametrize("t", [ggpy.F32, ggpy.F16], ids=lambda t: t.name)
def test_autotune_times_cudnn(cuda_backend, cache, t):
    """CUDABackend(autotune=True) lists cudnn among a conv's candidates, times it, and the result stays correct."""
    tuned = _backend(autotune=True)
    case = conv._conv_2d(t, "cont", *SHAPES[0], tb=t)
    node = case.build(ggpy.Context())
    assert "cudnn" in KERNELS["conv_2d"].candidates(node, tuned), cudnn_conv.refusal(node)
    result = run_case(case, tuned)
    assert result.ok, f"{case.id}: {result.message}"
    winner, times = autotune.WINNERS.memory[autotune.shape_key(node, tuned)]
    assert times.get("cudnn") is not None, f"the cudnn candidate failed or was not timed: {times}"
    print(f"{case.id}: winner {winner}, " + ", ".join(f"{c} {s * 1e6:.1f} us" for c, s in times.items() if s))
