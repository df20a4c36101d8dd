"""MobileSAM's image encoder on the CUDA backend vs the official PyTorch model (on the GPU, F32 without TF32),
and CUDA graphs: replayed results identical to plain launches, a new plan captured again.

Skips where cuda-python or a GPU is missing; the comparison with PyTorch where torch with CUDA or mobile_sam is.
Uses the session fixtures of tests/models/mobilesam_fixtures.py (a seeded random checkpoint and its F32 / F16 GGUF
conversions) and, for the CUDA-graph tests, which need no PyTorch, the random-weights model of ggpy.models.mobilesam.
"""
import numpy as np
import pytest

pytest.importorskip("cuda.bindings.driver")

import ggpy

pytestmark = pytest.mark.usefixtures("cuda_backend")       # conftest: skips without a GPU


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("mobile_sam")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def new_backend(**kw):
    """A fresh CUDABackend("cuda", **kw) (every test here asks for conftest's cuda_backend, which skips without a GPU)."""
    from ggpy.backends.cuda.backend import CUDABackend
    return CUDABackend("cuda", **kw)


@pytest.fixture(scope="module")
def torch_reference(torch, mobilesam_checkpoint):
    """(inputs, embeddings) of PyTorch's F32 encoder on the GPU (TF32 off) for two seeded images."""
    from ggpy.models.mobilesam.random_checkpoint import load_reference_model
    model = load_reference_model(mobilesam_checkpoint).image_encoder.cuda()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        xs = [torch.randn(1, 3, 1024, 1024, generator=torch.Generator().manual_seed(s)) for s in (5, 6)]
        with torch.inference_mode():
            refs = [model(x.cuda()).float().cpu().numpy() for x in xs]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    del model
    torch.cuda.empty_cache()
    return [x.numpy() for x in xs], refs


@pytest.mark.parametrize("wtype,tf32,tol", [("f32", False, 1e-4), ("f32", True, 3e-3), ("f16", False, 1e-2)])
def test_encoder_vs_torch(torch_reference, mobilesam_gguf_f32, mobilesam_gguf_f16, wtype, tf32, tol):
    from ggpy.models.mobilesam.runner import ImageEncoder
    enc = ImageEncoder(mobilesam_gguf_f32 if wtype == "f32" else mobilesam_gguf_f16,
                       backend=new_backend(allow_tf32=tf32))
    assert all(type(t.buffer).__name__ == "CUDABuffer" for t in enc.model.tensors.values())
    xs, refs = torch_reference
    errs = []
    for x, ref in zip(xs, refs):            # the second image replays the captured CUDA graph
        got = enc.encode_preprocessed(x)
        assert got.shape == (1, 256, 64, 64) and got.dtype == np.float32
        errs.append(rel_err(got, ref))
    print(f"mobilesam cuda {wtype}{' tf32' if tf32 else ''}: relative error vs torch {errs}")
    assert max(errs) < tol
    assert enc.backend.cuda_graph(enc.graph) is not None, "the encoder graph was not captured as a CUDA graph"


@pytest.mark.parametrize("dtype,tol", [("f16", 2e-3), ("bf16", 1.5e-2)])
def test_half_activations_batched(torch_reference, mobilesam_gguf_f32, dtype, tol):
    """F16 / BF16 activations, both images in one batch of 2: the errors of the issue, the casts fused into the
    GEMMs (cuBLASLt writing the half type), the depthwise convolutions and the window attention."""
    from ggpy.models.mobilesam.runner import ImageEncoder
    enc = ImageEncoder(mobilesam_gguf_f32, backend=new_backend(), dtype=dtype, batch=2)
    xs, refs = torch_reference
    got = enc.encode_preprocessed(np.concatenate(xs))
    errs = [rel_err(got[i], refs[i]) for i in range(2)]
    names = [step.name for step in enc.backend.program(enc.graph)]
    print(f"mobilesam cuda {dtype} batch 2: relative error vs torch {errs}; {len(names)} steps, copies "
          f"{[n for n in names if n.startswith('copy_')]}")
    assert max(errs) < tol
    assert any(f"+{dtype}+bias" in n for n in names) and any(n.startswith("win_attn") for n in names)
    # the patch embedding's first convolution reads the F32 image itself and writes GELU's result in the half type
    assert names[0] == f"conv_2d_direct_{dtype}_f32_{dtype}+{dtype}+bias+gelu_erf"


def test_cuda_graphs_identical_and_recaptured():
    """Replays of the captured graph give bit-identical embeddings to plain launches; a new plan re-captures."""
    from ggpy.models.mobilesam.random_weights import random_model
    from ggpy.models.mobilesam.runner import ImageEncoder
    mobilesam_gguf_f32 = random_model()
    x = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    x2 = np.random.default_rng(1).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    plain = ImageEncoder(mobilesam_gguf_f32, backend=new_backend(graphs=False))
    graphed = ImageEncoder(mobilesam_gguf_f32, backend=new_backend(graphs=True))
    want, want2 = plain.encode_preprocessed(x), plain.encode_preprocessed(x2)
    assert plain.backend.captures == 0 and plain.backend.cuda_graph(plain.graph) is None
    first = graphed.encode_preprocessed(x)                  # plain launches, then the capture
    assert graphed.backend.captures == 1
    captured = graphed.backend.cuda_graph(graphed.graph)
    assert captured is not None
    for _ in range(2):                                      # replays, on changed inputs too
        np.testing.assert_array_equal(graphed.encode_preprocessed(x2), want2)
        np.testing.assert_array_equal(graphed.encode_preprocessed(x), want)
    np.testing.assert_array_equal(first, want)
    assert graphed.backend.captures == 1 and graphed.backend.cuda_graph(graphed.graph) is captured
    ggpy.GraphAllocator(graphed.backend).alloc_graph(graphed.graph)     # a new plan, in buffers of its own
    np.testing.assert_array_equal(graphed.encode_preprocessed(x2), want2)
    assert graphed.backend.captures == 2 and graphed.backend.cuda_graph(graphed.graph) is not captured
    np.testing.assert_array_equal(graphed.encode_preprocessed(x), want)
    assert graphed.backend.captures == 2


def test_small_graph_capture_and_fallback():
    """A small graph: replay equals plain launches after its input changes; a step that cannot be captured
    (a host-side synchronize) makes the backend fall back to plain launches with the same results."""
    from scipy.special import erf
    b = new_backend()
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32)).set_input()
    out = ggpy.soft_max_ext(ggpy.gelu_erf(ggpy.add(a, a)), None, 0.5, 0.0)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(b).alloc_graph(graph)
    rng = np.random.default_rng(0)
    for _i in range(3):
        v = rng.standard_normal((32, 64)).astype(np.float32)
        a.set(v)
        b.compute(graph)
        z = 2 * v * 0.5 * (1 + erf(2 * v / np.sqrt(2))) * 0.5      # gelu_erf(2v) * scale
        z = np.exp(z - z.max(1, keepdims=True))
        np.testing.assert_allclose(out.numpy(), z / z.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert b.cuda_graph(graph) is not None and b.captures == 1
    for graphs in (True, False):                # profile: per-step GPU times, replayed as a graph or launched
        b.graphs = graphs
        prof = b.profile(graph)
        assert [name for _, name, _ in prof] == [s.name for s in b.program(graph)]
        assert all(t >= 0 for _, _, t in prof) and sum(t for _, _, t in prof) > 0
    b.graphs = True

    steps = b.program(graph)
    bad = type("Sync", (), {"node": steps[0].node, "name": "sync", "__call__": lambda self, s: s.synchronize()})()
    steps.insert(0, bad)                        # stream synchronize is illegal during capture
    b2 = new_backend()
    graph.backend_cache[(b2, "program")] = graph.backend_cache[(b, "program")]
    v = rng.standard_normal((32, 64)).astype(np.float32)
    a.set(v)
    b2.compute(graph)
    first = out.numpy()
    b2.compute(graph)
    np.testing.assert_array_equal(out.numpy(), first)
    assert b2.captures == 0 and b2.cuda_graph(graph) is None
