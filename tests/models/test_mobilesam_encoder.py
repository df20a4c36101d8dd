"""MobileSAM's image encoder on ggpy vs the official PyTorch model, block by block and end to end.

Random-weight checkpoints (BatchNorm statistics, LayerNorms and attention biases randomised) converted to
GGUF by ggpy/models/mobilesam/convert.py; skipped when torch or mobile_sam is not installed.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mobile_sam")

import ggpy  # noqa: E402
from ggpy.models.mobilesam import encoder as E  # noqa: E402
from ggpy.models.mobilesam.random_checkpoint import load_reference_model  # noqa: E402
from ggpy.model_file import load_gguf  # noqa: E402


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def torch_sam(mobilesam_checkpoint):
    return load_reference_model(mobilesam_checkpoint)


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


@pytest.fixture(scope="module")
def model_f32(mobilesam_gguf_f32, backend):
    return load_gguf(mobilesam_gguf_f32, backend, architecture="mobilesam")


def run_block(backend, build, x_ne, x_value):
    """Evaluate build(input tensor) on an input of ne x_ne holding x_value; returns the numpy result."""
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, x_ne).set_input()
    out = build(x)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    x.set(np.ascontiguousarray(x_value, dtype=np.float32).reshape(tuple(reversed(x_ne))))
    backend.compute(graph)
    return out.numpy()


def tokens_ne(c, w, h):
    return (c, w, h, 1)


def test_patch_embed(torch_sam, model_f32, backend):
    x = torch.randn(1, 3, 96, 80, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref = torch_sam.image_encoder.patch_embed(x)[0].permute(1, 2, 0).numpy()       # (H, W, C)
    got = run_block(backend, lambda t: E.patch_embed(model_f32, t), (80, 96, 3, 1), x.numpy())
    assert rel_err(got.reshape(ref.shape), ref) < 1e-5


@pytest.mark.parametrize("block", [0, 1])
def test_mbconv(torch_sam, model_f32, backend, block):
    x = torch.randn(1, 64, 40, 36, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = torch_sam.image_encoder.layers[0].blocks[block](x)[0].permute(1, 2, 0).numpy()
    got = run_block(backend, lambda t: E.mbconv(model_f32, f"{E.ENC}.layers.0.blocks.{block}", t),
                    tokens_ne(64, 36, 40), x[0].permute(1, 2, 0).numpy())
    assert rel_err(got.reshape(ref.shape), ref) < 1e-5


@pytest.mark.parametrize("layer,res,dim,stride", [(0, 256, 64, 2), (1, 128, 128, 2), (2, 64, 160, 1)])
def test_patch_merging(torch_sam, model_f32, backend, layer, res, dim, stride):
    x = torch.randn(1, res * res, dim, generator=torch.Generator().manual_seed(2))
    mod = torch_sam.image_encoder.layers[layer].downsample
    with torch.inference_mode():
        ref = mod(x.view(1, res, res, dim).permute(0, 3, 1, 2) if layer == 0 else x)[0].numpy()   # (L, C)
    got = run_block(backend, lambda t: E.patch_merging(model_f32, f"{E.ENC}.layers.{layer}.downsample", t, stride),
                    tokens_ne(dim, res, res), x.numpy())
    assert rel_err(got.reshape(ref.shape), ref) < 1e-5


@pytest.mark.parametrize("layer,res,dim", [(1, 128, 128), (2, 64, 160), (3, 64, 320)])
def test_tinyvit_block(torch_sam, model_f32, backend, layer, res, dim):
    """Window attention with padding (128 % 7, 64 % 14, 64 % 7 are not 0), bias tables, local conv, MLP."""
    x = torch.randn(1, res * res, dim, generator=torch.Generator().manual_seed(3))
    hp = E.EncoderParams.from_metadata(model_f32.metadata)
    with torch.inference_mode():
        ref = torch_sam.image_encoder.layers[layer].blocks[0](x)[0].numpy()
    got = run_block(backend, lambda t: E.tinyvit_block(model_f32, f"{E.ENC}.layers.{layer}.blocks.0", t,
                                                       hp.num_heads[layer], hp.window_sizes[layer]),
                    tokens_ne(dim, res, res), x.numpy())
    assert rel_err(got.reshape(ref.shape), ref) < 1e-5


def test_neck(torch_sam, model_f32, backend):
    x = torch.randn(1, 64 * 64, 320, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        ref = torch_sam.image_encoder.neck(x.view(1, 64, 64, 320).permute(0, 3, 1, 2)).numpy()
    got = run_block(backend, lambda t: E.neck(model_f32, t), tokens_ne(320, 64, 64), x.numpy())
    assert rel_err(got.reshape(ref.shape), ref) < 1e-5


@pytest.mark.parametrize("wtype,tol", [("f32", 1e-4), ("f16", 1e-2)])
def test_encoder_end_to_end(torch_sam, mobilesam_gguf_f32, mobilesam_gguf_f16, wtype, tol):
    from ggpy.models.mobilesam.runner import ImageEncoder
    enc = ImageEncoder(mobilesam_gguf_f32 if wtype == "f32" else mobilesam_gguf_f16, n_threads=2)
    x = torch.randn(1, 3, 1024, 1024, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        ref = torch_sam.image_encoder(x).numpy()
    got = enc.encode_preprocessed(x.numpy())
    assert got.shape == (1, 256, 64, 64) and got.dtype == np.float32
    assert rel_err(got, ref) < tol
    x2 = torch.randn(1, 3, 1024, 1024, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        ref2 = torch_sam.image_encoder(x2).numpy()
    plan = enc.plan
    assert rel_err(enc.encode_preprocessed(x2.numpy()), ref2) < tol       # re-evaluated, not re-planned
    assert enc.plan is plan


@pytest.mark.parametrize("dtype,tol", [("f16", 2e-3), ("bf16", 1.5e-2)])
def test_encoder_low_precision_activations(torch_sam, mobilesam_gguf_f32, dtype, tol):
    """Activations (and the encoder's weights) in F16 / BF16 against PyTorch's F32, two images in one batch."""
    from ggpy.models.mobilesam.runner import ImageEncoder
    enc = ImageEncoder(mobilesam_gguf_f32, n_threads=2, dtype=dtype, batch=2)
    types = {n.type for n in enc.graph.nodes if n.op in ("add", "norm", "gelu_erf", "win_part")}
    assert types == {getattr(ggpy, dtype.upper())}
    x = torch.randn(2, 3, 1024, 1024, generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        ref = torch_sam.image_encoder(x).numpy()
    got = enc.encode_preprocessed(x.numpy())
    assert got.shape == (2, 256, 64, 64) and got.dtype == np.float32
    for i in range(2):
        assert rel_err(got[i], ref[i]) < tol
