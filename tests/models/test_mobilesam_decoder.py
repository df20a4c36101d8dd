"""MobileSAM's prompt encoder and mask decoder on ggpy vs the official PyTorch modules, block by block, and the
Predictor end to end vs mobile_sam's SamPredictor on the same random-weight checkpoint and image.

Random-weight checkpoints (tests/models/mobilesam_fixtures.py) converted to GGUF by ggpy/models/mobilesam/convert.py;
skipped when torch or mobile_sam is not installed. The CUDA test skips without cuda-python or a GPU.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mobile_sam")

import ggpy
from ggpy.models.mobilesam import mask_decoder as D
from ggpy.models.mobilesam import prompt_encoder as P
from ggpy.models.mobilesam.predictor import PromptError, best_mask_index, sparse_prompt
from ggpy.models.mobilesam.random_checkpoint import load_reference_model
from ggpy.model_file import load_gguf

IMAGE_SHAPE = (240, 320, 3)
POINTS = np.array([[100.0, 50.0], [200.0, 180.0], [20.5, 230.0]])
LABELS = np.array([1, 0, 1])
BOX = np.array([30.0, 40.0, 250.0, 200.0])


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def torch_sam(mobilesam_checkpoint):
    return load_reference_model(mobilesam_checkpoint)


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


@pytest.fixture(scope="module")
def model(mobilesam_gguf_f32, backend):
    return load_gguf(mobilesam_gguf_f32, backend, architecture="mobilesam")


@pytest.fixture(scope="module")
def hp(model):
    return D.DecoderParams.from_metadata(model.metadata)


def evaluate(backend, build, *inputs):
    """Evaluate build(*input tensors) on inputs given as numpy arrays of shape reversed(ne) (int32 -> I32,
    else F32); returns the numpy value of each output."""
    ctx = ggpy.Context()
    tensors = [ctx.new_tensor(ggpy.I32 if x.dtype == np.int32 else ggpy.F32, tuple(reversed(x.shape))).set_input()
               for x in inputs]
    outs = build(*tensors)
    outs = outs if isinstance(outs, tuple) else (outs,)
    graph = ggpy.Graph()
    for o in outs:
        graph.build_forward_expand(o)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for t, x in zip(tensors, inputs):
        t.set(x)
    backend.compute(graph)
    return [o.numpy() for o in outs]


def f32(t):
    return np.ascontiguousarray(t.detach().numpy(), dtype=np.float32)


# -- prompt encoder --------------------------------------------------------------------------------------
def test_dense_positional_encoding(torch_sam, model, backend, hp):
    e = hp.embed_size
    with torch.inference_mode():
        ref = torch_sam.prompt_encoder.get_dense_pe()[0].permute(1, 2, 0).numpy()            # (E, E, D)
    (got,) = evaluate(backend, lambda g: P.dense_positional_encoding(model, g), P.grid_coords(e))
    assert got.shape == ref.shape and rel_err(got, ref) < 1e-6


@pytest.mark.parametrize("points,box", [(True, False), (False, True), (True, True)])
def test_sparse_embeddings(torch_sam, model, backend, points, box):
    """Points with labels 1/0 (and SAM's padding point when there is no box), box corners; 1024 frame."""
    coords = np.array([[10.0, 1000.0], [512.3, 7.0], [1023.0, 640.0]])
    labels = np.array([1, 0, 1])
    corners = np.array([100.0, 200.0, 900.0, 700.5])
    args = (coords if points else None, labels if points else None, corners if box else None)
    with torch.inference_mode():
        ref = torch_sam.prompt_encoder(
            points=(torch.as_tensor(coords, dtype=torch.float)[None], torch.as_tensor(labels, dtype=torch.int)[None])
            if points else None,
            boxes=torch.as_tensor(corners, dtype=torch.float)[None] if box else None, masks=None)[0][0].numpy()
    xy, kinds, keep = sparse_prompt(*args, (1024, 1024), (1024, 1024))
    assert len(kinds) == ref.shape[0] == {(True, False): 4, (False, True): 2, (True, True): 5}[points, box]
    (got,) = evaluate(backend, lambda c, k, w: P.sparse_embeddings(model, c, k, w, 1024), xy, kinds, keep)
    assert rel_err(got, ref) < 1e-6


def test_mask_embedding(torch_sam, model, backend, hp):
    mask = randn(1, 1, hp.mask_size, hp.mask_size, seed=1) * 4
    with torch.inference_mode():
        ref = torch_sam.prompt_encoder(points=None, boxes=None, masks=mask)[1][0].permute(1, 2, 0).numpy()
    (got,) = evaluate(backend, lambda m: P.mask_embedding(model, m), f32(mask))
    assert got.shape == ref.shape and rel_err(got, ref) < 1e-5


# -- mask decoder ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [0, 1])
def test_two_way_block(torch_sam, model, backend, hp, layer):
    """TwoWayAttentionBlock (layer 0 skips the queries' PE in self-attention) on 7 tokens and 300 image tokens."""
    q, qpe, k, kpe = (randn(1, n, hp.embed_dim, seed=s) for s, n in enumerate((7, 7, 300, 300)))
    block = torch_sam.mask_decoder.transformer.layers[layer]
    with torch.inference_mode():
        ref_q, ref_k = block(queries=q, keys=k, query_pe=qpe, key_pe=kpe)
    got_q, got_k = evaluate(backend, lambda *t: D.two_way_block(model, f"{D.TR}.layers.{layer}", *t, hp.num_heads,
                                                                  layer == 0),
                            *(f32(x[0]) for x in (q, k, qpe, kpe)))
    assert rel_err(got_q, ref_q[0]) < 1e-5 and rel_err(got_k, ref_k[0]) < 1e-5


def test_final_attention(torch_sam, model, backend, hp):
    q, qpe, k, kpe = (randn(1, n, hp.embed_dim, seed=s) for s, n in enumerate((6, 6, 200, 200), start=10))
    tr = torch_sam.mask_decoder.transformer
    with torch.inference_mode():
        ref = tr.norm_final_attn(q + tr.final_attn_token_to_image(q=q + qpe, k=k + kpe, v=k))[0]
    (got,) = evaluate(backend, lambda *t: D.final_attention(model, *t, hp.num_heads),
                      *(f32(x[0]) for x in (q, k, qpe, kpe)))
    assert rel_err(got, ref) < 1e-5


def test_two_way_transformer(torch_sam, model, backend, hp):
    """The whole transformer on a 16x12 image: (B, C, H, W) image and PE, (B, T, C) tokens."""
    image, pe = randn(1, hp.embed_dim, 12, 16, seed=20), randn(1, hp.embed_dim, 12, 16, seed=21)
    tokens = randn(1, 8, hp.embed_dim, seed=22)
    with torch.inference_mode():
        ref_q, ref_k = torch_sam.mask_decoder.transformer(image, pe, tokens)

    def tok(x):   # (1, C, H, W) -> image tokens, numpy (H * W, C)
        return f32(x[0].flatten(1).T)
    got_q, got_k = evaluate(backend, lambda i, p, t: D.two_way_transformer(model, hp, i, p, t),
                            tok(image), tok(pe), f32(tokens[0]))
    assert rel_err(got_q, ref_q[0]) < 1e-5 and rel_err(got_k, ref_k[0]) < 1e-5


def test_output_upscaling(torch_sam, model, backend, hp):
    x = randn(1, hp.embed_dim, 6, 10, seed=30)
    with torch.inference_mode():
        ref = torch_sam.mask_decoder.output_upscaling(x)[0].permute(1, 2, 0).numpy()          # (24, 40, D/8)
    (got,) = evaluate(backend, lambda t: D.output_upscaling(model, t), f32(x[0].permute(1, 2, 0)))
    assert got.shape == ref.shape == (24, 40, hp.embed_dim // 8) and rel_err(got, ref) < 1e-5


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_hypernetwork_mlp(torch_sam, model, backend, hp, index):
    x = randn(5, hp.embed_dim, seed=40 + index)
    with torch.inference_mode():
        ref = torch_sam.mask_decoder.output_hypernetworks_mlps[index](x).numpy()
    (got,) = evaluate(backend, lambda t: D.mlp(model, f"{D.MD}.output_hypernetworks_mlps.{index}", t), f32(x))
    assert rel_err(got, ref) < 1e-5


def test_iou_head(torch_sam, model, backend, hp):
    tokens = randn(9, hp.embed_dim, seed=50)
    with torch.inference_mode():
        ref = torch_sam.mask_decoder.iou_prediction_head(tokens[:1]).numpy()[0]
    (got,) = evaluate(backend, lambda t: D.iou_head(model, t), f32(tokens))
    assert got.shape == (hp.num_mask_tokens,) and rel_err(got, ref) < 1e-5


# -- the predictor end to end ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(7).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)


@pytest.fixture(scope="module")
def sam_predictor(torch_sam, image):
    from mobile_sam import SamPredictor
    p = SamPredictor(torch_sam)
    p.set_image(image)
    return p


@pytest.fixture(scope="module")
def predictor(mobilesam_gguf_f32, image):
    from ggpy.models.mobilesam.predictor import Predictor
    p = Predictor(mobilesam_gguf_f32, n_threads=2)
    p.set_image(image)
    return p


def sam_predict(sam_predictor, **kw):
    """SamPredictor.predict once, with logits: (masks, iou, low-res logits, mask logits); masks = logits > 0 is
    exactly what it returns without return_logits."""
    logits, iou, low_res = sam_predictor.predict(**kw, return_logits=True)
    return logits > sam_predictor.model.mask_threshold, iou, low_res, logits


def check_against_sam(got, ref, tol):
    """Low-res logits and IoU within tol; masks equal but for a few pixels whose logit is ~0. Returns the
    relative errors of the low-res logits and of the IoU predictions."""
    (masks, iou, low_res), (ref_masks, ref_iou, ref_low_res, ref_logits) = got, ref
    assert masks.dtype == bool and iou.dtype == np.float32 and low_res.dtype == np.float32
    assert masks.shape == ref_masks.shape and low_res.shape == ref_low_res.shape and iou.shape == ref_iou.shape
    errs = rel_err(low_res, ref_low_res), rel_err(iou, ref_iou)
    assert max(errs) < tol
    differ = masks != ref_masks
    assert differ.sum() <= 5 and np.all(np.abs(ref_logits[differ]) < tol * np.abs(ref_logits).max())
    return errs


PROMPTS = {
    "points": {"point_coords": POINTS, "point_labels": LABELS},
    "box": {"box": BOX},
    "points+box": {"point_coords": POINTS[:1], "point_labels": LABELS[:1], "box": BOX},
}


@pytest.mark.parametrize("multimask", [True, False])
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_predict_vs_sam_predictor(predictor, sam_predictor, prompt, multimask):
    """Each prompt, then again with the best low-res mask of the first call as mask input."""
    kw = dict(PROMPTS[prompt], multimask_output=multimask)
    got = predictor.predict(**kw)
    ref = sam_predict(sam_predictor, **kw)
    assert got[0].shape == ((3 if multimask else 1),) + IMAGE_SHAPE[:2]
    errs = check_against_sam(got, ref, 1e-4)
    best = best_mask_index(got[1])
    assert best == int(np.argmax(ref[1]))
    got2 = predictor.predict(**kw, mask_input=got[2][best][None])
    errs2 = check_against_sam(got2, sam_predict(sam_predictor, **kw, mask_input=ref[2][best][None]), 1e-4)
    print(f"{prompt} multimask={multimask}: low-res, IoU relative errors {errs}, with mask input {errs2}")


def test_predict_without_points_or_box(predictor, sam_predictor):
    """No sparse prompt at all (the decoder sees its output tokens only), with and without a mask input."""
    mask = np.random.default_rng(3).normal(0.0, 5.0, (1, 256, 256)).astype(np.float32)
    for kw in ({}, {"mask_input": mask}):
        check_against_sam(predictor.predict(**kw), sam_predict(sam_predictor, **kw), 1e-4)
    assert (0, False, 1) in predictor.decoders and (0, True, 1) in predictor.decoders


def test_return_logits(predictor, sam_predictor):
    logits, _, _ = predictor.predict(point_coords=POINTS, point_labels=LABELS, return_logits=True)
    ref = sam_predictor.predict(point_coords=POINTS, point_labels=LABELS, return_logits=True)[0]
    assert logits.dtype == np.float32 and logits.shape == ref.shape and rel_err(logits, ref) < 1e-4


def test_plan_reused_and_embedding_set_once(predictor, monkeypatch):
    """Prompts of one shape reuse one planned graph; predict writes nothing into the buffer that holds the image
    embedding and the dense positional encoding."""
    predictor.predict(point_coords=POINTS[:2], point_labels=LABELS[:2])
    dec = predictor.decoder(3, False)                  # 2 points + the padding point
    plans, n_graphs = dec.plans, len(predictor.decoders)
    writes = []
    monkeypatch.setattr(predictor.image_embedding.buffer, "set_tensor", lambda *a: writes.append(a))
    for i in range(3):
        predictor.predict(point_coords=POINTS[i:i + 2] if i < 2 else POINTS[:2] + 5, point_labels=LABELS[:2],
                          multimask_output=bool(i % 2))
    assert predictor.decoder(3, False) is dec and len(predictor.decoders) == n_graphs
    assert all(a is b for a, b in zip(dec.plans, plans)) and len(dec.plans) == len(plans) == 1
    assert writes == []
    assert set(predictor.last_timings) == {"decode", "postprocess"}
    assert predictor.original_size == IMAGE_SHAPE[:2] and predictor.input_size == (768, 1024)


@pytest.mark.parametrize("kw,match", [
    ({"point_coords": [[400.0, 10.0]], "point_labels": [1]}, r"point 0 at \(400, 10\) lies outside the 320x240 image"),
    ({"point_coords": [[10.0, -1.0]], "point_labels": [1]}, r"point 0 at \(10, -1\) lies outside"),
    ({"point_coords": POINTS, "point_labels": [1]}, r"point_labels has shape \(1,\) for 3 point\(s\); expected \(3,\)"),
    ({"point_coords": POINTS, "point_labels": [1, 2, 0]}, r"point_labels are \[1, 2, 0\]; expected 1 .* or 0"),
    ({"point_coords": [1.0, 2.0], "point_labels": [1]}, r"point_coords has shape \(2,\); expected \(N, 2\)"),
    ({"point_coords": POINTS}, r"point_coords were given without point_labels"),
    ({"point_labels": LABELS}, r"point_labels were given without point_coords"),
    ({"box": [50.0, 40.0, 10.0, 200.0]}, r"box \(50, 40, 10, 200\) has x1 < x0 or y1 < y0"),
    ({"box": [0.0, 0.0, 330.0, 200.0]}, r"box \(0, 0, 330, 200\) lies outside the 320x240 image"),
    ({"box": [0.0, 0.0, 10.0]}, r"box has shape \(3,\); expected \(4,\)"),
    ({"box": BOX, "mask_input": np.zeros((256, 128))}, r"mask_input has shape \(256, 128\); expected \(1, 256, 256\)"),
])
def test_prompt_errors(predictor, kw, match):
    with pytest.raises(PromptError, match=match):
        predictor.predict(**kw)


def test_f16_predictor(mobilesam_gguf_f16, image, sam_predictor):
    from ggpy.models.mobilesam.predictor import Predictor
    p = Predictor(mobilesam_gguf_f16, n_threads=2)
    with pytest.raises(RuntimeError, match="call set_image"):
        p.predict(box=BOX)
    p.set_image(image)
    for kw in PROMPTS.values():
        _, iou, low_res = p.predict(**kw)
        _, ref_iou, ref_low_res, _ = sam_predict(sam_predictor, **kw)
        print(f"f16 {sorted(kw)}: low-res {rel_err(low_res, ref_low_res):.2e}, IoU {rel_err(iou, ref_iou):.2e}")
        assert rel_err(low_res, ref_low_res) < 1e-2 and rel_err(iou, ref_iou) < 1e-2


def test_cuda_predictor(cuda_backend, mobilesam_gguf_f32, image, sam_predictor):
    """On a GPU (F32, no TF32): the same results; sin and cos, which the CUDA backend lacks, run on the CPU."""
    from ggpy.models.mobilesam.predictor import Predictor
    p = Predictor(mobilesam_gguf_f32, backend="cuda")
    p.set_image(image)
    for kw in PROMPTS.values():
        for multimask in (True, False):
            errs = check_against_sam(p.predict(**kw, multimask_output=multimask),
                                     sam_predict(sam_predictor, **kw, multimask_output=multimask), 1e-3)
            print(f"cuda {sorted(kw)} multimask={multimask}: low-res, IoU relative errors {errs}")
    dec = p.decoder(2, False)
    plans = dec.plans
    p.predict(box=BOX + 1)
    assert all(a is b for a, b in zip(dec.plans, plans))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_low_precision_predictor_masks(mobilesam_gguf_f32, image, predictor, dtype):
    """Encoder activations in F16 / BF16: the masks agree with the F32 predictor's on > 99.5% of the pixels."""
    from ggpy.models.mobilesam.predictor import Predictor
    p = Predictor(mobilesam_gguf_f32, n_threads=2, dtype=dtype)
    p.set_image(image)
    for kw in PROMPTS.values():
        masks, _, _ = p.predict(**kw)
        ref, _, _ = predictor.predict(**kw)
        agree = float((masks == ref).mean())
        print(f"{dtype} {sorted(kw)}: masks agree on {agree:.5f} of the pixels")
        assert agree > 0.995 and 0.001 < ref.mean() < 0.999


def test_predict_batch_equals_one_by_one(predictor):
    """A batch of prompts of two shapes (single points, and point + box) with and without mask inputs: each result
    equals the prompt's own predict, in the order given; a bad prompt anywhere is refused before anything runs."""
    rng = np.random.default_rng(11)
    h, w = predictor.original_size
    points = [{"point_coords": rng.uniform(0, [w, h], (1, 2)), "point_labels": np.array([1])} for _ in range(3)]
    mixed = {"point_coords": np.array([[w * 0.4, h * 0.5]]), "point_labels": np.array([0]), "box": BOX}
    low = predictor.predict(**points[0])[2][:1]
    prompts = [points[0], mixed, points[1], points[2], dict(points[1], mask_input=low), dict(points[2], mask_input=low)]
    batch = predictor.predict_batch(prompts)
    assert (2, False, 3) in predictor.decoders and (2, True, 2) in predictor.decoders   # point + padding point
    for prompt, (masks, iou, low_res) in zip(prompts, batch):
        ref_masks, ref_iou, ref_low = predictor.predict(**prompt)
        assert masks.shape == ref_masks.shape and (masks == ref_masks).mean() > 0.9999
        assert np.abs(low_res - ref_low).max() < 1e-3 * np.abs(ref_low).max()
        assert np.abs(iou - ref_iou).max() < 1e-4
    with pytest.raises(PromptError, match="prompt 1 has keys"):
        predictor.predict_batch([points[0], {"points": 1}])


@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
def test_set_image_again(mobilesam_gguf_f32, image, backend_name, request):
    """Image after image: set_image leaves each image's embedding (E, E, D order) in image_embedding, written by the
    encoder's graph on the backend: as a separate CPU encoder's."""
    from ggpy.models.mobilesam.predictor import Predictor
    from ggpy.models.mobilesam.runner import ImageEncoder
    if backend_name == "cuda":
        request.getfixturevalue("cuda_backend")         # skips without a GPU
    p = Predictor(mobilesam_gguf_f32, backend=backend_name, n_threads=2)
    reference = ImageEncoder(mobilesam_gguf_f32, "cpu", 2)
    other = np.random.default_rng(8).integers(0, 256, (300, 500, 3), dtype=np.uint8)
    for img in (image, other, image):
        p.set_image(img)
        want = reference.encode(img)[0].transpose(1, 2, 0)
        assert rel_err(p.image_embedding.numpy().reshape(want.shape), want) < 1e-4
        assert p.original_size == img.shape[:2]
