"""SAM's automatic mask generator on ggpy (ggpy/models/mobilesam/automatic.py) vs mobile_sam's
SamAutomaticMaskGenerator on the same random-weight checkpoint and image, and its parts (RLE, COCO RLE, box NMS,
crops, mask boxes, the post-processing graph) vs the official helpers.

There is no torchvision here: the official generator's batched_nms is replaced by `reference_nms` below, a plain
torch loop written from torchvision's definition (independent of ggpy/models/mobilesam/box_nms.py).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mobile_sam")

from ggpy.models.mobilesam import box_nms, crops, mask_rle, regions  # noqa: E402
from ggpy.models.mobilesam.automatic import AutomaticMaskGenerator  # noqa: E402
from ggpy.models.mobilesam.mask_stats import MaskStatsGraph  # noqa: E402
from ggpy.models.mobilesam.predictor import Predictor  # noqa: E402
from ggpy.models.mobilesam.random_checkpoint import load_reference_model  # noqa: E402

import mobile_sam.automatic_mask_generator as official  # noqa: E402  (after conftest's timm/torchvision stubs)
from mobile_sam.utils import amg  # noqa: E402

IMAGE_SHAPE = (240, 320, 3)


def reference_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms from its definition: per category, highest score first (stable on ties), drop
    every box whose IoU with a kept one exceeds the threshold; kept indices by decreasing score."""
    boxes, scores = boxes.float(), scores.float()
    order = torch.sort(scores, descending=True, stable=True).indices.tolist()
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep, dropped = [], set()
    for n, i in enumerate(order):
        if i in dropped:
            continue
        keep.append(i)
        for j in order[n + 1:]:
            if idxs[j] != idxs[i]:
                continue
            w = (torch.minimum(boxes[i, 2], boxes[j, 2]) - torch.maximum(boxes[i, 0], boxes[j, 0])).clamp(min=0)
            h = (torch.minimum(boxes[i, 3], boxes[j, 3]) - torch.maximum(boxes[i, 1], boxes[j, 1])).clamp(min=0)
            inter = w * h
            if float(inter / (area[i] + area[j] - inter)) > iou_threshold:
                dropped.add(j)
    return torch.as_tensor(keep, dtype=torch.long)


@pytest.fixture(autouse=True)
def official_nms(monkeypatch):
    monkeypatch.setattr(official, "batched_nms", reference_nms)


def spread_state_dict(state: dict) -> dict:
    """The random checkpoint with its mask decoder's heads moved so that the generator's filters have work:
    predicted IoUs around the default 0.88 threshold (iou head bias + 0.95) and mask logits of magnitude ~1 so that
    stability scores spread over [0, 1] (second upscaling convolution x 10, its 2x2 kernel made position-independent
    like the first so that masks are not speckled)."""
    state = dict(state)
    for name in ("mask_decoder.output_upscaling.0.weight", "mask_decoder.output_upscaling.3.weight"):
        w = state[name]
        state[name] = w.mean(dim=(2, 3), keepdim=True).expand_as(w).clone()
    state["mask_decoder.output_upscaling.3.weight"] *= 10
    state["mask_decoder.iou_prediction_head.layers.2.bias"] = state["mask_decoder.iou_prediction_head.layers.2.bias"] + 0.95
    return state


@pytest.fixture(scope="module")
def spread_checkpoint(mobilesam_checkpoint):
    path = mobilesam_checkpoint.parent / "mobile_sam_spread.pt"
    torch.save(spread_state_dict(torch.load(mobilesam_checkpoint, weights_only=True)), path)
    return path


class CachedPredictor(Predictor):
    """A Predictor that encodes each distinct image once (the tests run several generators on the same crops)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.encodings = {}
        encode = self.encoder.encode

        def cached(image):
            key = (image.shape, image.tobytes())
            if key not in self.encodings:
                self.encodings[key] = encode(image)
            return self.encodings[key]
        self.encoder.encode = cached


@pytest.fixture(scope="module")
def sam(spread_checkpoint):
    """The official model; while the module runs, SamPredictor.set_image keeps each distinct image's features (the
    official generator sets every crop again for each configuration)."""
    model = load_reference_model(spread_checkpoint)
    features = {}
    set_image = official.SamPredictor.set_image

    def cached_set_image(self, image, image_format="RGB"):
        key = (image.shape, image.tobytes())
        if key not in features:
            set_image(self, image, image_format)
            features[key] = self.features
            return
        self.reset_image()
        self.original_size = image.shape[:2]
        self.input_size = tuple(self.transform.apply_image(image).shape[:2])
        self.features, self.is_image_set = features[key], True
    official.SamPredictor.set_image = cached_set_image
    yield model
    official.SamPredictor.set_image = set_image


@pytest.fixture(scope="module")
def predictor(spread_checkpoint):
    from ggpy.models.mobilesam.convert import convert
    path = spread_checkpoint.with_suffix(".gguf")
    convert(spread_checkpoint, path, type="f32", progress=False)
    return CachedPredictor(path, n_threads=2)


@pytest.fixture(scope="module")
def image():
    """Rectangles of random colours on a grey background (uniform regions give the random encoder's embedding
    some structure)."""
    rng = np.random.default_rng(5)
    img = np.full(IMAGE_SHAPE, 90, np.uint8)
    for _ in range(10):
        y, x = rng.integers(0, 200), rng.integers(0, 280)
        img[y:y + rng.integers(20, 120), x:x + rng.integers(20, 160)] = rng.integers(0, 256, 3)
    return img


# -- the generator end to end ----------------------------------------------------------------------------------
def mask_iou(a, b) -> float:
    union = (a | b).sum()
    return 1.0 if union == 0 else float((a & b).sum() / union)


def check_records(got: list, ref: list):
    """Same count; each reference record has a counterpart of the same point and crop whose mask has IoU > 0.99
    with it, predicted IoU and stability score within 1e-3, and the same area and box but for a few pixels."""
    assert len(got) == len(ref)
    unmatched = list(range(len(got)))
    worst = 1.0
    for r in ref:
        same = [i for i in unmatched if got[i]["point_coords"] == r["point_coords"]
                and got[i]["crop_box"] == [int(v) for v in r["crop_box"]]]
        assert same, f"no mask of point {r['point_coords']} in crop {r['crop_box']}"
        i = max(same, key=lambda i: mask_iou(got[i]["segmentation"], r["segmentation"]))
        unmatched.remove(i)
        g = got[i]
        iou = mask_iou(g["segmentation"], r["segmentation"])
        worst = min(worst, iou)
        assert iou > 0.99
        assert abs(g["predicted_iou"] - r["predicted_iou"]) < 1e-3
        assert np.isclose(g["stability_score"], r["stability_score"], rtol=0, atol=1e-3, equal_nan=True)
        assert abs(g["area"] - r["area"]) <= max(5, 1e-3 * r["area"])
        assert np.abs(np.subtract(g["bbox"], r["bbox"])).max() <= 2
        assert g["segmentation"].dtype == bool and g["segmentation"].shape == IMAGE_SHAPE[:2]
    return worst


PERMISSIVE = {"pred_iou_thresh": 0.0, "stability_score_thresh": 0.0}
CONFIGS = {
    "default": {},
    "permissive": PERMISSIVE,
    "permissive, no nms": dict(PERMISSIVE, box_nms_thresh=1.0),
    "default, crop layer": {"crop_n_layers": 1, "points_per_side": 2},
    "permissive, crop layer": dict(PERMISSIVE, crop_n_layers=1, points_per_side=2),
    "other parameters": {"crop_n_layers": 1, "crop_n_points_downscale_factor": 2, "pred_iou_thresh": 0.5,
                         "stability_score_thresh": 0.3, "stability_score_offset": 0.5, "box_nms_thresh": 0.9,
                         "crop_nms_thresh": 0.5},
    "point grids": {"points_per_side": None, "crop_n_layers": 1, "point_grids": [
        np.random.default_rng(8).uniform(0, 1, (10, 2)), np.random.default_rng(9).uniform(0, 1, (3, 2))],
        **PERMISSIVE},
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_generator_vs_official(sam, predictor, image, config):
    kw = dict({"points_per_side": 4, "points_per_batch": 8}, **CONFIGS[config])
    ref = official.SamAutomaticMaskGenerator(sam, **kw).generate(image)
    gen = AutomaticMaskGenerator(predictor, **kw, chunk=8)
    got = gen.generate(image)
    worst = check_records(got, ref)
    print(f"{config}: {len(got)} masks, lowest mask IoU {worst:.5f}, stages {gen.timings}")
    assert set(gen.timings) == {"encode", "decode", "postprocess", "nms"}
    if config == "permissive, no nms":
        assert len(got) == 3 * 16                       # nothing dropped: every mask of every point compared
    if config == "default":
        assert 0 < len(got) < 3 * 16                   # the filters keep some and drop some


def connected_components_with_stats(image, connectivity):
    """cv2.connectedComponentsWithStats for the official small-region cleanup, through SciPy's labelling: (labels
    including the background 0, label image, stats whose last column is each label's area, centroids)."""
    from scipy import ndimage
    labels, n = ndimage.label(image, structure=np.ones((3, 3)) if connectivity == 8 else None)
    stats = np.zeros((n + 1, 5), np.int32)
    stats[:, -1] = np.bincount(labels.ravel(), minlength=n + 1)
    return n + 1, labels, stats, None


def test_small_regions_vs_official(sam, predictor, image, monkeypatch):
    """min_mask_region_area > 0 (OpenCV's components replaced by SciPy's in the official code): holes filled,
    islands dropped, unchanged masks preferred in the new NMS, changed masks' RLEs and boxes taken."""
    import types
    monkeypatch.setitem(__import__("sys").modules, "cv2",
                        types.SimpleNamespace(connectedComponentsWithStats=connected_components_with_stats))
    kw = dict(points_per_side=3, points_per_batch=9, box_nms_thresh=1.0, **PERMISSIVE)
    ref = official.SamAutomaticMaskGenerator(sam, **kw, min_mask_region_area=400).generate(image)
    got = AutomaticMaskGenerator(predictor, **kw, min_mask_region_area=400).generate(image)
    check_records(got, ref)
    before = AutomaticMaskGenerator(predictor, **kw).generate(image)
    assert len(got) == 27 and sorted(r["area"] for r in got) != sorted(r["area"] for r in before)   # it changed some


def test_filters_have_work(sam, predictor, image):
    """The spread checkpoint puts predicted IoUs and stability scores on both sides of the default thresholds."""
    got = AutomaticMaskGenerator(predictor, points_per_side=4, points_per_batch=16, box_nms_thresh=1.0,
                                 **PERMISSIVE).generate(image)
    iou = np.array([r["predicted_iou"] for r in got])
    stability = np.array([r["stability_score"] for r in got])
    assert 0 < (iou > 0.88).sum() < len(iou) and 0 < (stability >= 0.95).sum() < len(iou)
    assert len({tuple(r["bbox"]) for r in got}) > 3


def test_coco_rle_output(predictor, image):
    """output_mode coco_rle: the same masks as binary_mask, their counts strings decoding to them."""
    kw = dict(points_per_side=3, points_per_batch=9, **PERMISSIVE, box_nms_thresh=1.0)
    binary = AutomaticMaskGenerator(predictor, **kw).generate(image)
    coco = AutomaticMaskGenerator(predictor, **kw, output_mode="coco_rle").generate(image)
    assert len(coco) == len(binary) == 27
    for c, b in zip(coco, binary):
        assert c["segmentation"]["size"] == list(IMAGE_SHAPE[:2]) and isinstance(c["segmentation"]["counts"], str)
        np.testing.assert_array_equal(decode_coco(c["segmentation"]), b["segmentation"])
        assert {k: v for k, v in c.items() if k != "segmentation"} == {k: v for k, v in b.items() if k != "segmentation"}


# -- parts ------------------------------------------------------------------------------------------------------
def decode_coco(rle: dict) -> np.ndarray:
    """pycocotools' rleFrString + rleDecode, written from its C source: bool mask (H, W)."""
    s, counts, p = rle["counts"], [], 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << 5 * k
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << 5 * k
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    h, w = rle["size"]
    return amg.rle_to_mask({"size": [h, w], "counts": counts})


def test_rle_vs_official():
    rng = np.random.default_rng(1)
    for density in (0.0, 0.02, 0.5, 0.97, 1.0):
        masks = rng.random((5, 23, 31)) < density
        masks[0, 0, 0] = True                                  # a mask starting with a set pixel
        got, ref = mask_rle.masks_to_rle(masks), amg.mask_to_rle_pytorch(torch.as_tensor(masks))
        assert got == ref
        assert mask_rle.columns_to_rle(np.ascontiguousarray(masks.transpose(0, 2, 1), np.float32)) == ref
        for rle, m in zip(got, masks):
            np.testing.assert_array_equal(mask_rle.rle_to_mask(rle), m)
            assert mask_rle.rle_area(rle) == amg.area_from_rle(rle) == m.sum()
            np.testing.assert_array_equal(decode_coco(mask_rle.coco_rle(rle)), m)


def test_coco_strings_as_pycocotools_writes_them():
    """Strings pycocotools 2.0.11's mask.encode gave for these masks."""
    small = np.zeros((5, 7), bool)
    small[1:4, 2:6] = True
    small[0, 0] = True
    big = np.zeros((300, 400), bool)
    big[10:250, 30:380] = True
    big[100:120, 50:60] = False
    assert mask_rle.coco_rle(mask_rle.masks_to_rle(small[None])[0]) == {"size": [5, 7], "counts": "01:2H000004"}
    counts = mask_rle.coco_rle(mask_rle.masks_to_rle(big[None])[0])["counts"]
    assert counts.startswith("bi8`7l1" + "0" * 38 + "ZKhNX1X1hN") and counts.endswith("0Vk5")


def test_box_nms_vs_reference():
    rng = np.random.default_rng(2)
    for n, categories in ((40, 1), (60, 3)):
        xy = rng.integers(0, 50, (n, 2))
        boxes = np.concatenate([xy, xy + rng.integers(15, 40, (n, 2))], axis=1).astype(np.float32)
        scores = rng.choice(np.linspace(0, 1, 7), n).astype(np.float32)        # ties, broken by order
        cats = rng.integers(0, categories, n)
        for thresh in (0.3, 0.7):
            got = box_nms.batched_nms(boxes, scores, cats, thresh)
            ref = reference_nms(torch.as_tensor(boxes), torch.as_tensor(scores), torch.as_tensor(cats), thresh)
            np.testing.assert_array_equal(got, ref.numpy())
            assert 0 < len(got) < n
    assert len(box_nms.batched_nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0), 0.5)) == 0


def test_crops_and_grids_vs_official():
    for size, layers, overlap in (((240, 320), 1, 512 / 1500), ((777, 513), 2, 0.2)):
        assert crops.crop_boxes(size, layers, overlap) == amg.generate_crop_boxes(size, layers, overlap)
    for got, ref in zip(crops.layer_point_grids(7, 2, 2), amg.build_all_layer_point_grids(7, 2, 2)):
        np.testing.assert_array_equal(got, ref)
    boxes = np.array([[0, 0, 10, 10], [15, 5, 60, 40], [1, 1, 59, 30], [30, 30, 40, 40]])
    crop, image_box = [100, 50, 160, 100], [0, 0, 160, 100]
    np.testing.assert_array_equal(crops.near_crop_edge(boxes, crop, image_box),
                                  amg.is_box_near_crop_edge(torch.as_tensor(boxes), crop, image_box).numpy())


def test_mask_to_box_vs_official():
    rng = np.random.default_rng(3)
    masks = rng.random((6, 17, 23)) < 0.01
    masks[0] = False
    np.testing.assert_array_equal(regions.mask_to_box(masks), amg.batched_mask_to_box(torch.as_tensor(masks)).numpy())


def test_remove_small_regions():
    mask = np.zeros((12, 12), bool)
    mask[1:9, 1:9] = True
    mask[4, 4] = False                       # a one-pixel hole
    mask[10:12, 10:12] = True                # a 4-pixel island apart from the square
    filled, changed = regions.remove_small_regions(mask, 3, "holes")
    assert changed and filled[4, 4] and filled.sum() == mask.sum() + 1
    cleaned, changed = regions.remove_small_regions(filled, 5, "islands")
    assert changed and not cleaned[10:12, 10:12].any() and cleaned.sum() == 64
    assert regions.remove_small_regions(cleaned, 5, "islands") == (cleaned, False)
    only_small = np.zeros((6, 6), bool)
    only_small[0, 0] = only_small[3:5, 3:5] = True
    kept, _ = regions.remove_small_regions(only_small, 10, "islands")
    assert kept.sum() == 4 and kept[3:5, 3:5].all()          # every island small: the largest stays


def test_mask_stats_graph_vs_official(sam, predictor, image):
    """Upscaling, stability counts and boxes of random low-res logits, gathered from a store in another order, vs
    Sam.postprocess_masks, calculate_stability_score and batched_mask_to_box (including an empty and a full mask)."""
    predictor.set_image(image)
    rng = np.random.default_rng(4)
    low = rng.normal(0, 1, (5, 64, 64)).repeat(4, 1).repeat(4, 2).astype(np.float32) * 3
    low += rng.normal(0, 0.3, low.shape).astype(np.float32)
    low[1] = -5.0
    low[2] = 5.0
    import ggpy
    ctx = ggpy.Context()
    store = ctx.new_tensor(ggpy.F32, (256 * 256, 6))                     # the masks as a decoder graph stores them
    ggpy.alloc_ctx_tensors(ctx, predictor.backends[0])
    order = np.array([3, 0, 5, 1, 2, 4])                                  # row of each mask in the store
    stored = np.zeros((6, 256 * 256), np.float32)
    stored[order] = low.reshape(5, -1)[[0, 1, 2, 3, 4, 4]]
    store.set(stored)
    graph = MaskStatsGraph(predictor.hp, predictor.backends, store, predictor.input_size, predictor.original_size, 7)
    got = graph.run(order[:5])
    with torch.inference_mode():
        logits = sam.postprocess_masks(torch.as_tensor(low)[:, None], predictor.input_size, predictor.original_size)[:, 0]
    masks = logits > 0
    ref_stability = amg.calculate_stability_score(logits, 0.0, 1.0).numpy()
    with np.errstate(invalid="ignore"):
        stability = got["intersections"] / got["unions"]                     # 0 / 0 for the empty mask, as SAM's
    np.testing.assert_allclose(stability, ref_stability, rtol=0, atol=1e-3)
    binary = got["binary"].transpose(0, 2, 1) > 0                       # the masks come back column by column
    assert set(np.unique(got["binary"])) == {0.0, 1.0} and (binary != masks.numpy()).mean() < 1e-4
    np.testing.assert_array_equal(got["area"], binary.sum(axis=(1, 2)))
    np.testing.assert_array_equal(got["boxes"], amg.batched_mask_to_box(torch.as_tensor(binary)).numpy())
    assert np.abs(got["boxes"] - amg.batched_mask_to_box(masks).numpy()).max() <= 1
    assert got["area"][1] == 0 and got["unions"][1] == 0 and (got["boxes"][1] == 0).all()
    assert got["area"][2] == got["unions"][2] == got["intersections"][2] == IMAGE_SHAPE[0] * IMAGE_SHAPE[1]


def test_grid_decoder_equals_decoder_graph(predictor, image):
    """The decoder with the first block's shared work and the fused upscaling gives mask_decoder's results."""
    from ggpy.models.mobilesam.grid_decoder import GridDecoderGraph
    predictor.set_image(image)
    rng = np.random.default_rng(6)
    b = 3
    coords = np.zeros((b, 2, 2), np.float32)
    coords[:, 0] = rng.uniform(0, 1024, (b, 2))
    kinds = np.tile(np.array([2, 0], np.int32), (b, 1))
    keep = np.tile(np.array([[1.0], [0.0]], np.float32), (b, 1, 1))
    p = predictor
    grid = GridDecoderGraph(p.model, p.hp, p.backends, p.image_embedding, p.image_pe, 2, b)
    iou = grid.run(coords, kinds, keep).copy()
    got = grid.masks(), iou
    ref = p.decoder(2, False, b).run(coords, kinds, keep, None)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and np.abs(g - r).max() <= 1e-5 * np.abs(r).max()


@pytest.mark.parametrize("kw,match", [
    ({"points_per_side": None}, "exactly one of them"),
    ({"point_grids": [np.zeros((4, 2))]}, "exactly one of them"),
    ({"output_mode": "png"}, "output_mode is 'png'; expected one of binary_mask"),
    ({"points_per_batch": 0}, "points_per_batch is 0"),
    ({"crop_n_layers": -1}, "crop_n_layers is -1"),
    ({"crop_n_layers": 1, "crop_n_points_downscale_factor": 0}, "crop_n_points_downscale_factor is 0; expected 1"),
    ({"chunk": 0}, "chunk is 0; expected a positive number"),
    ({"points_per_side": None, "point_grids": [np.zeros((4, 2))], "crop_n_layers": 1}, "a grid for each of the 2"),
])
def test_bad_parameters(predictor, kw, match):
    with pytest.raises(ValueError, match=match):
        AutomaticMaskGenerator(predictor, **kw)


def test_cuda_generator(cuda_backend, predictor, spread_checkpoint, image):
    """On a GPU (F32): the decoder graph, the post-processing graph and the records equal the CPU generator's."""
    gpu = Predictor(spread_checkpoint.with_suffix(".gguf"), backend="cuda")
    kw = dict(points_per_side=4, points_per_batch=8, box_nms_thresh=1.0, **PERMISSIVE)
    ref = AutomaticMaskGenerator(predictor, **kw).generate(image)
    got = AutomaticMaskGenerator(gpu, **kw).generate(image)
    assert len(got) == len(ref) == 48
    check_records(got, ref)
