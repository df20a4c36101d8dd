"""MobileSAM conversion to GGUF, the generic GGUF loader and SAM's pre-processing.

The loader and pre-processing tests need no torch; the conversion tests use a seeded random checkpoint
(tests/models/mobilesam_fixtures.py) and skip when torch or mobile_sam is missing.
"""
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from PIL import Image

import ggpy
from ggpy.model_file import load_gguf
from ggpy.models.mobilesam.options import SAMPLE_IMAGE as SAMPLE
from ggpy.models.mobilesam.preprocess import PIXEL_MEAN, PIXEL_STD, load_image, preprocess


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


def write_gguf(path, arch="mobilesam", tensors=None):
    w = gguf.GGUFWriter(os.fspath(path), arch)
    w.add_uint32(f"{arch}.image_size", 1024)
    for name, array in (tensors or {}).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- the GGUF loader (no torch) ----------------------------------------------------------------------
def test_load_gguf_reads_metadata_and_tensors_in_ne_order(tmp_path, backend):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.linspace(-1, 1, 6).astype(np.float16).reshape(1, 6)
    path = write_gguf(tmp_path / "m.gguf", tensors={"a.weight": a, "b.bias": b})
    mf = load_gguf(path, backend, architecture="mobilesam")
    assert mf.metadata["general.architecture"] == "mobilesam" and mf.metadata["mobilesam.image_size"] == 1024
    ta, tb = mf.get("a.weight"), mf.get("b.bias")
    assert (ta.type, ta.ne) == (ggpy.F32, (4, 3, 2, 1)) and (tb.type, tb.ne) == (ggpy.F16, (6, 1, 1, 1))
    np.testing.assert_array_equal(ta.numpy(), a)
    np.testing.assert_array_equal(tb.numpy(), b.reshape(6))
    assert ta.buffer is mf.buffer and set(mf.tensors) == {"a.weight", "b.bias"} and ta in mf.ctx.tensors


def test_load_gguf_missing_tensor_names_it_and_the_file(tmp_path, backend):
    path = write_gguf(tmp_path / "m.gguf", tensors={"a": np.zeros(3, np.float32)})
    with pytest.raises(ggpy.ModelFileError, match=r"has no tensor 'nope'") as e:
        load_gguf(path, backend).get("nope")
    assert "m.gguf" in str(e.value)


def test_load_gguf_refuses_another_architecture(tmp_path, backend):
    path = write_gguf(tmp_path / "llama.gguf", arch="llama")
    with pytest.raises(ggpy.ModelFileError, match=r"general\.architecture='llama', expected 'mobilesam'"):
        load_gguf(path, backend, architecture="mobilesam")


def test_load_gguf_refuses_unsupported_tensor_types(tmp_path, backend):
    path = write_gguf(tmp_path / "i.gguf", tensors={"idx": np.arange(4, dtype=np.int32)})
    with pytest.raises(ggpy.ModelFileError, match=r"tensor 'idx' .* GGUF type I32; ggpy loads F32, F16, BF16, Q4_0"):
        load_gguf(path, backend)


@pytest.mark.parametrize("keep", [0.95, 0.5, 0.02])
def test_load_gguf_refuses_truncated_files(tmp_path, backend, keep):
    full = write_gguf(tmp_path / "full.gguf", tensors={"w.weight": np.ones((64, 64), np.float32)}).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[: int(len(full) * keep)])
    match = r"cut\.gguf is (truncated: tensor 'w\.weight'|a truncated or corrupt GGUF file)"
    with pytest.raises(ggpy.ModelFileError, match=match):
        load_gguf(cut, backend)


def test_load_gguf_refuses_a_huge_array_length_quickly(tmp_path, backend):
    """A corrupt array count in the metadata is refused with ggpy's model-file error at once (the stock gguf reader
    would loop over up to 2**64 elements reading nothing past the end)."""
    import time
    w = gguf.GGUFWriter(os.fspath(tmp_path / "ok.gguf"), "mobilesam")
    w.add_array("mobilesam.embed_dims", [64, 128, 160, 320])
    w.add_tensor("w.weight", np.ones((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    field = gguf.GGUFReader(tmp_path / "ok.gguf").fields["mobilesam.embed_dims"]
    count_at = int(field.offset) + 8 + len("mobilesam.embed_dims") + 4 + 4          # key length, key, type, item type
    blob = bytearray((tmp_path / "ok.gguf").read_bytes())
    assert int.from_bytes(blob[count_at:count_at + 8], "little") == 4
    blob[count_at + 7] = 0x01                                                         # 2**56 + 4 items
    (tmp_path / "huge.gguf").write_bytes(bytes(blob))
    t0 = time.perf_counter()
    with pytest.raises(ggpy.ModelFileError, match=r"huge\.gguf is a truncated or corrupt GGUF file .*counts 72057594037927940 items; at most"):
        load_gguf(tmp_path / "huge.gguf", backend)
    assert time.perf_counter() - t0 < 5


def test_load_gguf_refuses_non_gguf_and_missing_files(tmp_path, backend):
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n" * 10)
    match = r"notes\.txt is not a GGUF file: it starts with b'not ', expected the magic b'GGUF'"
    with pytest.raises(ggpy.ModelFileError, match=match):
        load_gguf(text, backend)
    with pytest.raises(ggpy.ModelFileError, match=r"absent\.gguf does not exist"):
        load_gguf(tmp_path / "absent.gguf", backend)


# -- pre-processing (no torch) ----------------------------------------------------------------------
@pytest.mark.parametrize("h,w", [(300, 200), (120, 512), (1024, 1024), (2000, 1500)])
def test_preprocess_resizes_longest_side_normalises_and_pads(h, w):
    img = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    x = preprocess(img)
    assert x.shape == (3, 1024, 1024) and x.dtype == np.float32
    scale = 1024 / max(h, w)
    nh, nw = int(h * scale + 0.5), int(w * scale + 0.5)
    assert np.all(x[:, nh:, :] == 0) and np.all(x[:, :, nw:] == 0)
    lo = (0 - np.array(PIXEL_MEAN)) / np.array(PIXEL_STD)
    hi = (255 - np.array(PIXEL_MEAN)) / np.array(PIXEL_STD)
    inside = x[:, :nh, :nw].reshape(3, -1)
    assert np.all(inside.min(1) >= lo - 1e-5) and np.all(inside.max(1) <= hi + 1e-5)


def test_preprocess_equals_the_rgb_resize_normalised():
    """preprocess resizes each channel on its own thread: equal to Pillow's resize of the RGB image, then (x - mean) /
    std in float32, on shapes where Pillow runs its vertical pass first and on those where it runs it second."""
    rng = np.random.default_rng(7)
    shapes = [(770, 769), (500, 37), (37, 500), (1090, 424), (1295, 3), (3000, 4000), (1024, 700), (1, 1)]
    shapes += [tuple(int(v) for v in rng.integers(1, 2500, 2)) for _ in range(32)]
    for h, w in shapes:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        scale = 1024 / max(h, w)
        nh, nw = int(h * scale + 0.5), int(w * scale + 0.5)
        rgb = np.asarray(Image.fromarray(img).resize((nw, nh), Image.BILINEAR)) if (nh, nw) != (h, w) else img
        want = np.zeros((3, 1024, 1024), np.float32)
        want[:, :nh, :nw] = ((rgb.astype(np.float32) - np.float32(PIXEL_MEAN)) / np.float32(PIXEL_STD)).transpose(2, 0, 1)
        np.testing.assert_array_equal(preprocess(img), want, err_msg=f"image {h}x{w}")


def test_preprocess_of_a_uniform_image_is_its_normalised_colour():
    img = np.full((50, 80, 3), (10, 128, 250), dtype=np.uint8)
    x = preprocess(img)
    want = (np.float32([10, 128, 250]) - np.float32(PIXEL_MEAN)) / np.float32(PIXEL_STD)
    np.testing.assert_array_equal(x[:, :640, :], np.broadcast_to(want[:, None, None], (3, 640, 1024)))
    assert np.all(x[:, 640:, :] == 0)


def test_load_image_reads_the_sample_and_reports_bad_files(tmp_path):
    img = load_image(SAMPLE)
    assert img.dtype == np.uint8 and img.shape == (770, 769, 3)
    with pytest.raises(FileNotFoundError, match=r"absent\.jpg does not exist"):
        load_image(tmp_path / "absent.jpg")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(ValueError, match=r"cannot read .*bad\.jpg as an image"):
        load_image(bad)
    with pytest.raises(ValueError, match=r"uint8 RGB image of shape \(H, W, 3\), got float64 \(4, 4\)"):
        preprocess(np.zeros((4, 4)))


# -- conversion (torch, mobile_sam) -----------------------------------------------------------------
@pytest.fixture(scope="module")
def torch_env():
    torch = pytest.importorskip("torch")
    pytest.importorskip("mobile_sam")
    return torch


@pytest.fixture(scope="module")
def reference(torch_env, mobilesam_checkpoint):
    from ggpy.models.mobilesam.random_checkpoint import load_reference_model

    return load_reference_model(mobilesam_checkpoint)


@pytest.fixture(scope="module")
def state(torch_env, mobilesam_checkpoint):
    return torch_env.load(mobilesam_checkpoint, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def f32(mobilesam_gguf_f32, backend):
    return load_gguf(mobilesam_gguf_f32, backend, architecture="mobilesam")


@pytest.fixture(scope="module")
def f16(mobilesam_gguf_f16, backend):
    return load_gguf(mobilesam_gguf_f16, backend, architecture="mobilesam")


def test_metadata(f32, f16):
    m = f32.metadata
    assert m["general.architecture"] == "mobilesam" and m["mobilesam.layout"] == "ggml-ne"
    assert m["mobilesam.image_size"] == 1024 and m["mobilesam.neck_dim"] == 256
    assert m["mobilesam.embed_dims"] == [64, 128, 160, 320] and m["mobilesam.depths"] == [2, 2, 6, 2]
    assert m["mobilesam.num_heads"] == [2, 4, 5, 10] and m["mobilesam.window_sizes"] == [7, 7, 14, 7]
    assert m["mobilesam.mlp_ratio"] == 4.0 and m["mobilesam.mbconv_expand_ratio"] == 4.0
    assert m["mobilesam.local_conv_size"] == 3
    assert m["mobilesam.prompt_embed_dim"] == 256 and m["mobilesam.mask_in_chans"] == 16
    assert (m["mobilesam.decoder_depth"], m["mobilesam.decoder_num_heads"], m["mobilesam.decoder_mlp_dim"]) == (2, 8, 2048)
    assert m["mobilesam.decoder_attention_downsample_rate"] == 2 and m["mobilesam.num_multimask_outputs"] == 3
    assert m["mobilesam.iou_head_hidden_dim"] == 256
    np.testing.assert_allclose(m["mobilesam.pixel_mean"], PIXEL_MEAN, rtol=1e-7)
    np.testing.assert_allclose(m["mobilesam.pixel_std"], PIXEL_STD, rtol=1e-7)
    assert m["mobilesam.file_type"] == "f32" and f16.metadata["mobilesam.file_type"] == "f16"


def _conv_bn_prefixes(state):
    return {k[: -len(".c.weight")] for k in state if k.endswith(".c.weight")}


def test_tensor_names_and_shapes(f32, state):
    convs = _conv_bn_prefixes(state)
    attns = {k[: -len(".attention_biases")] for k in state if k.endswith(".attention_biases")}
    kept = {k: tuple(v.shape) for k, v in state.items()
            if not k.startswith(("image_encoder.head.", "image_encoder.norm_head."))
            and not k.endswith(("num_batches_tracked", "attention_biases"))
            and not any(k.startswith((p + ".c.", p + ".bn.")) for p in convs)}
    want = dict(kept)
    for p in convs:
        cout = state[p + ".c.weight"].shape[0]
        want[p + ".weight"], want[p + ".bias"] = tuple(state[p + ".c.weight"].shape), (cout,)
    for p in attns:
        heads, n_off = state[p + ".attention_biases"].shape
        want[p + ".ab"] = (heads, n_off, n_off)           # N = window² = number of offsets
    got = {name: tuple(reversed(t.ne[: len(want.get(name, t.ne))])) for name, t in f32.tensors.items()}
    assert got == want
    assert len(convs) == 27 and len(attns) == 10 and len(f32.tensors) == 327
    assert any(k.startswith("prompt_encoder.") for k in got) and any(k.startswith("mask_decoder.") for k in got)


@pytest.mark.parametrize("prefix", ["image_encoder.patch_embed.seq.0", "image_encoder.layers.0.blocks.1.conv2",
                                    "image_encoder.layers.0.blocks.1.conv3",
                                    "image_encoder.layers.2.blocks.3.local_conv",
                                    "image_encoder.layers.2.downsample.conv2"])
def test_folded_conv_equals_conv2d_bn_fuse(f32, reference, prefix):
    fused = reference.get_submodule(prefix).fuse()
    w, b = f32.get(prefix + ".weight"), f32.get(prefix + ".bias")
    assert w.ne == tuple(reversed(fused.weight.shape)) and w.type == ggpy.F32
    np.testing.assert_allclose(w.numpy().reshape(fused.weight.shape), fused.weight.detach().numpy(), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(b.numpy(), fused.bias.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_attention_bias_tables_equal_the_cached_ab(f32, reference):
    attns = [(n, m) for n, m in reference.named_modules() if type(m).__name__ == "Attention" and hasattr(m, "ab")]
    assert len(attns) == 10
    for name, module in attns:
        ab = module.ab.numpy()
        assert np.abs(ab).max() > 0.1, "the random checkpoint must give attention biases values"
        np.testing.assert_array_equal(f32.get(name + ".ab").numpy().reshape(ab.shape), ab)


def test_other_tensors_are_copied_unchanged(f32, state):
    for key in ["image_encoder.layers.1.blocks.0.attn.qkv.weight", "image_encoder.layers.3.blocks.1.mlp.norm.bias",
                "image_encoder.neck.2.weight", "image_encoder.neck.3.weight",
                "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix",
                "mask_decoder.output_upscaling.0.weight", "mask_decoder.iou_prediction_head.layers.2.bias"]:
        want = state[key].numpy()
        t = f32.get(key)
        assert t.ne[: want.ndim] == tuple(reversed(want.shape))
        np.testing.assert_array_equal(t.numpy().reshape(want.shape), want)


def test_f16_stores_weights_of_two_or_more_dims_only(mobilesam_gguf_f16, f16, f32):
    ndim = {t.name: len(t.data.shape) for t in gguf.GGUFReader(mobilesam_gguf_f16).tensors}
    n16 = 0
    for name, t in f16.tensors.items():
        want = ggpy.F16 if name.endswith(".weight") and ndim[name] >= 2 else ggpy.F32
        assert t.type == want, name
        n16 += want == ggpy.F16
        np.testing.assert_allclose(t.numpy().astype(np.float32), f32.get(name).numpy(), rtol=1e-3, atol=1e-4)
    for name in ["image_encoder.layers.2.blocks.0.attn.ab", "image_encoder.layers.1.blocks.0.attn.qkv.bias",
                 "image_encoder.neck.1.weight", "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"]:
        assert f16.get(name).type == ggpy.F32, name
    assert f16.get("image_encoder.neck.2.weight").type == ggpy.F16 and n16 > 100


def test_official_architecture_table_matches_build_sam_vit_t(torch_env):
    from ggpy.models.mobilesam.architecture import official_shapes
    from ggpy.models.mobilesam.convert import reference_shapes

    assert {k: tuple(v) for k, v in official_shapes().items()} == reference_shapes()


# -- refused checkpoints -----------------------------------------------------------------------------
def _convert_fails(torch, tmp_path, obj, match):
    from ggpy.models.mobilesam.convert import convert

    ckpt, out = tmp_path / "bad.pt", tmp_path / "out.gguf"
    torch.save(obj, ckpt)
    with pytest.raises(ggpy.ModelFileError, match=match):
        convert(ckpt, out, progress=False)
    assert os.listdir(tmp_path) == ["bad.pt"], "nothing may be written when conversion fails"


def test_missing_key_is_named(torch_env, state, tmp_path):
    bad = dict(state)
    del bad["image_encoder.layers.2.blocks.4.attn.proj.weight"]
    key = r"'image_encoder\.layers\.2\.blocks\.4\.attn\.proj\.weight'"
    _convert_fails(torch_env, tmp_path, bad, rf"missing key {key} \(expected shape \(160, 160\)\)")


def test_wrong_shape_is_named_with_expected_and_found(torch_env, state, tmp_path):
    bad = dict(state)
    bad["image_encoder.neck.0.weight"] = torch_env.zeros(256, 160, 1, 1)
    _convert_fails(torch_env, tmp_path, bad,
                   r"key 'image_encoder\.neck\.0\.weight' has shape \(256, 160, 1, 1\), expected \(256, 320, 1, 1\)")


def test_unexpected_key_is_named(torch_env, state, tmp_path):
    bad = dict(state, **{"image_encoder.extra.weight": torch_env.zeros(3)})
    _convert_fails(torch_env, tmp_path, bad, r"unexpected key 'image_encoder\.extra\.weight'")


@pytest.mark.parametrize("obj,match", [([1, 2, 3], r"holds a list, expected a state dict"),
                                       ({"a": 1}, r"key 'a' holds a int, expected a tensor")])
def test_not_a_state_dict(torch_env, tmp_path, obj, match):
    _convert_fails(torch_env, tmp_path, obj, match)


class _Payload:
    """A pickled object that torch's safe loader must refuse (it would run code with weights_only=False)."""

    def __reduce__(self):
        return (os.getcwd, ())


def test_pickled_code_is_refused(torch_env, tmp_path):
    _convert_fails(torch_env, tmp_path, {"x": _Payload()},
                   r"cannot be read as a torch state dict by the safe loader")


def test_wrapped_state_dict_is_unwrapped(torch_env, state, tmp_path):
    from ggpy.models.mobilesam.convert import load_state_dict

    for wrapper in ("model", "state_dict"):
        path = tmp_path / f"{wrapper}.pt"
        torch_env.save({wrapper: state, "epoch": 3}, path)
        assert set(load_state_dict(path)) == set(state)


def test_hyper_parameters_are_checked_against_the_architecture():
    from ggpy.models.mobilesam.architecture import TINYVIT_5M
    from ggpy.models.mobilesam.convert import check_hparams

    match = r"ckpt: num_heads .* is \(2, 4, 8, 10\), MobileSAM has \(2, 4, 5, 10\)"
    with pytest.raises(ggpy.ModelFileError, match=match):
        check_hparams(dict(TINYVIT_5M, num_heads=(2, 4, 8, 10)), "ckpt")


def test_truncated_mobilesam_gguf(mobilesam_gguf_f32, tmp_path, backend):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path(mobilesam_gguf_f32).read_bytes()[: 10 << 20])
    match = r"cut\.gguf is (truncated: tensor '.*' needs bytes up to \d+|a truncated or corrupt GGUF file)"
    with pytest.raises(ggpy.ModelFileError, match=match):
        load_gguf(cut, backend, architecture="mobilesam")


def test_preprocess_matches_sam_predictor(torch_env):
    """Against mobile_sam's ResizeLongestSide.apply_image + Sam.preprocess (torchvision's PIL resize, or the
    stand-in of ggpy/models/mobilesam/timm_stub.py where torchvision is not installed)."""
    from mobile_sam import build_sam_vit_t
    from mobile_sam.utils.transforms import ResizeLongestSide

    sam = build_sam_vit_t()
    for img in (load_image(SAMPLE), np.random.default_rng(1).integers(0, 256, (333, 517, 3), dtype=np.uint8)):
        resized = ResizeLongestSide(1024).apply_image(img)
        x = torch_env.as_tensor(resized).permute(2, 0, 1).contiguous()[None]
        want = sam.preprocess(x)[0].numpy()
        np.testing.assert_allclose(preprocess(img), want, rtol=0, atol=1e-6)


def test_bf16_file_stores_weights_rounded_to_nearest_even(mobilesam_checkpoint, f32, tmp_path, backend):
    """`convert --type bf16`: the same tensors as F16 would take, stored BF16 bit for bit as ml_dtypes rounds the
    F32 values; everything else F32. (The encoder on it, F32 activations: 2.9e-3 from PyTorch's F32.)"""
    import ml_dtypes

    from ggpy.models.mobilesam.convert import convert
    path = tmp_path / "bf16.gguf"
    convert(mobilesam_checkpoint, path, type="bf16", progress=False)
    mf = load_gguf(path, backend, architecture="mobilesam")
    assert mf.metadata["mobilesam.file_type"] == "bf16"
    n = 0
    for name, t in mf.tensors.items():
        ref = f32.get(name).numpy()
        if t.type == ggpy.BF16:
            n += 1
            assert name.endswith(".weight"), name
            assert np.array_equal(t.numpy().view(np.uint16), ref.astype(ml_dtypes.bfloat16).view(np.uint16)), name
        else:
            assert t.type == ggpy.F32 and np.array_equal(t.numpy(), ref), name
    assert n > 100 and mf.get("image_encoder.layers.2.blocks.0.attn.ab").type == ggpy.F32
