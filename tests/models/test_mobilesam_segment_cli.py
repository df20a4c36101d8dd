"""MobileSAM's `segment` command (seeded random weights, no torch) and the mask / overlay rendering."""
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import ggpy.models.mobilesam.cli as cli_module
from ggpy.models.mobilesam import render
from ggpy.models.mobilesam.cli import main
from ggpy.models.mobilesam.random_weights import random_model

ROOT = Path(__file__).resolve().parents[2]


# -- reference: SAM's post-processing as two linear maps (independent of the predictor's graph) ---------
def bilinear_matrix(out_size: int, in_size: int) -> np.ndarray:
    """float64 (out_size, in_size) matrix R of F.interpolate(mode="bilinear", align_corners=False) along one
    axis (out = R @ in), its weights computed in float32 as PyTorch's kernels do (the source index by one fused
    multiply-add)."""
    f32 = np.float32
    scale = f32(in_size) / f32(out_size)
    src = np.maximum((np.float64(scale) * (np.arange(out_size, dtype=f32) + f32(0.5)) - 0.5).astype(f32), f32(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = np.clip(src - i0.astype(f32), f32(0), f32(1))
    r = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    np.add.at(r, (rows, i0), f32(1) - w1)
    np.add.at(r, (rows, i1), w1)
    return r


def postprocess_matrix(original: int, resized: int, image_size: int, mask_size: int) -> np.ndarray:
    """float32 (original, mask_size): SAM's postprocess_masks along one axis (low-res mask -> image_size,
    crop to the resized image, -> original size) as one linear map."""
    return (bilinear_matrix(original, resized) @ bilinear_matrix(image_size, mask_size)[:resized]).astype(np.float32)


# -- rendering ---------------------------------------------------------------------------------------
def _disc(h=40, w=60, cx=30, cy=20, r=10):
    yy, xx = np.mgrid[:h, :w]
    return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r


def test_save_mask_writes_a_greyscale_png_of_0_and_255(tmp_path):
    mask = _disc()
    render.save_mask(mask, tmp_path / "m.png")
    with Image.open(tmp_path / "m.png") as im:
        assert im.format == "PNG" and im.mode == "L" and im.size == (60, 40)
        back = np.asarray(im)
    assert set(np.unique(back)) == {0, 255}
    np.testing.assert_array_equal(back == 255, mask)


def test_save_mask_refuses_a_non_boolean_mask(tmp_path):
    with pytest.raises(ValueError, match=r"bool array of shape \(H, W\); got float32 \(2, 3\)"):
        render.save_mask(np.zeros((2, 3), np.float32), tmp_path / "m.png")


def test_outline_is_the_mask_border():
    mask = np.zeros((6, 7), bool)
    mask[1:5, 2:6] = True                       # a 4x4 square: 12 border pixels around a 2x2 interior
    edge = mask.copy()
    edge[2:4, 3:5] = False
    np.testing.assert_array_equal(render.outline(mask), edge)
    full = np.ones((3, 4), bool)                 # the image edge counts as outside
    assert render.outline(full).sum() == 3 * 4 - 2


def test_blend_tints_only_masked_pixels():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    mask = _disc()
    out = render.blend(image, mask, color=(200, 100, 0), alpha=0.5)
    np.testing.assert_array_equal(out[~mask], image[~mask])
    expected = np.round(0.5 * image[mask] + 0.5 * np.array([200, 100, 0])).astype(np.uint8)
    np.testing.assert_array_equal(out[mask], expected)
    np.testing.assert_array_equal(render.blend(image, mask, alpha=0.0), image)


def test_blend_refuses_a_mask_of_another_size():
    with pytest.raises(ValueError, match=r"mask has shape \(4, 5\); expected the image's \(H, W\) = \(40, 60\)"):
        render.blend(np.zeros((40, 60, 3), np.uint8), np.zeros((4, 5), bool))


def test_composite_draws_outline_points_and_box():
    image = np.full((40, 60, 3), 128, np.uint8)
    mask = _disc()
    out = render.composite(image, mask, points=[[5, 5], [54, 34]], labels=[1, 0], box=[20, 8, 42, 33])
    assert out.shape == image.shape and out.dtype == np.uint8
    assert tuple(out[5, 5]) == render.POINT_COLORS[1]           # the centres of the two point markers
    assert tuple(out[34, 54]) == render.POINT_COLORS[0]
    assert tuple(out[20, 20]) == render.BOX_COLOR                # left edge of the box
    assert tuple(out[20, 30]) != tuple(image[20, 30])            # mask interior: tinted
    assert tuple(out[10, 30]) == render.MASK_COLOR               # top of the disc: its outline
    assert tuple(out[0, 30]) == (128, 128, 128)                  # outside everything: unchanged


def test_composite_refuses_labels_that_do_not_match_the_points():
    image = np.zeros((40, 60, 3), np.uint8)
    with pytest.raises(ValueError, match="2 points but 1 labels"):
        render.composite(image, _disc(), points=[[1, 1], [2, 2]], labels=[1])
    with pytest.raises(ValueError, match=r"point \(1, 1\) has label 2; expected 1 \(foreground\) or 0"):
        render.composite(image, _disc(), points=[[1, 1]], labels=[2])


# -- the command line ----------------------------------------------------------------------------------
def cli(*args):
    return subprocess.run([sys.executable, "-m", "ggpy.models.mobilesam", *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    """A 160x120 RGB picture: a bright disc on a gradient (the encoder still runs at 1024x1024)."""
    yy, xx = np.mgrid[:120, :160]
    picture = np.stack([xx * 255 // 159, yy * 255 // 119, np.full_like(xx, 60)], axis=-1).astype(np.uint8)
    picture[(xx - 80) ** 2 + (yy - 60) ** 2 < 30 ** 2] = (250, 240, 200)
    path = tmp_path_factory.mktemp("segment") / "picture.png"
    Image.fromarray(picture).save(path)
    return path


@pytest.fixture(scope="module")
def model_path():
    return str(random_model())


def iou_scores(stdout: str) -> tuple:
    """(scores, best index) from the line 'IoU scores: a b c; best: mask i (IoU a)'."""
    m = re.search(r"^IoU scores: ([-0-9. ]+); best: mask (\d) \(IoU ([-0-9.]+)\)$", stdout, re.MULTILINE)
    assert m, stdout
    return [float(v) for v in m.group(1).split()], int(m.group(2))


def test_segment_writes_mask_overlay_and_logits(model_path, image_path, tmp_path):
    out, overlay, logits = tmp_path / "mask.png", tmp_path / "overlay.png", tmp_path / "logits.npy"
    r = cli("segment", "-m", model_path, "-i", str(image_path), "-p", "80", "60", "-p", "20", "100", "-l", "1", "0",
            "-o", str(out), "--composite", str(overlay), "--logits", str(logits), "-t", "2")
    assert r.returncode == 0, r.stderr
    with Image.open(out) as im:
        assert (im.format, im.mode, im.size) == ("PNG", "L", (160, 120))
        mask = np.asarray(im)
    assert set(np.unique(mask)) <= {0, 255}
    with Image.open(overlay) as im:
        assert (im.mode, im.size) == ("RGB", (160, 120))
    low = np.load(logits)
    assert low.shape == (1, 3, 256, 256) and low.dtype == np.float32 and np.isfinite(low).all()
    scores, best = iou_scores(r.stdout)
    assert len(scores) == 3 and best == int(np.argmax(scores))
    # the PNG is mask `best`: the predictor's upscaling of its logits (160x120 -> 1024x768 input), thresholded
    rows, cols = postprocess_matrix(120, 768, 1024, 256), postprocess_matrix(160, 1024, 1024, 256)
    agree = [np.mean((rows @ low[0, c] @ cols.T > 0) == (mask == 255)) for c in range(3)]
    assert agree[best] > 0.999 and sorted(agree)[1] < 0.9, agree
    assert "decode" in r.stdout and "per prompt" in r.stdout and "post-processing" in r.stdout
    for path in (out, overlay, logits):
        assert str(path) in r.stdout


class ThreeMasks:
    """A stand-in Predictor whose second mask has the best IoU; masks are thirds of the image."""

    IOU = np.array([0.2, 0.9, 0.5], np.float32)

    def __init__(self, model, **options):
        self.encoder = SimpleNamespace(graph=SimpleNamespace(nodes=[]), planned_bytes=0, backend="stand-in")
        self.last_timings = {"decode": 0.001, "postprocess": 0.002}

    def set_image(self, image):
        h, w = image.shape[:2]
        self.masks = np.zeros((3, h, w), bool)
        for i in range(3):
            self.masks[i, :, i * w // 3:(i + 1) * w // 3] = True

    def decoder(self, n_sparse, with_mask):
        return SimpleNamespace(graph=SimpleNamespace(nodes=[]), plans=())

    def predict(self, point_coords, point_labels, box, multimask_output):
        return self.masks, self.IOU, np.arange(3 * 256 * 256, dtype=np.float32).reshape(3, 256, 256)


def test_segment_writes_the_mask_of_the_best_iou(image_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli_module, "Predictor", ThreeMasks)
    monkeypatch.setattr(cli_module, "checked_model", lambda model, _: (model, {"mobilesam.image_size": 1024}))
    out, logits = tmp_path / "mask.png", tmp_path / "logits.npy"
    main(["segment", "-m", "unused.gguf", "-i", str(image_path), "-p", "5", "5", "-o", str(out), "--logits", str(logits)])
    assert iou_scores(capsys.readouterr().out) == ([0.2, 0.9, 0.5], 1)
    expected = np.zeros((120, 160), bool)
    expected[:, 53:106] = True                   # the middle third: mask 1
    with Image.open(out) as im:
        np.testing.assert_array_equal(np.asarray(im) == 255, expected)
    saved = np.load(logits)
    assert saved.shape == (1, 3, 256, 256) and saved.dtype == np.float32
    assert saved[0, 2, 0, 0] == 2 * 256 * 256    # all three masks' logits, in order


def test_segment_single_mask_with_a_box(model_path, image_path, tmp_path):
    logits = tmp_path / "logits.npy"
    r = cli("segment", "-m", model_path, "-i", str(image_path), "--box", "40", "20", "120", "100", "--single-mask",
            "-o", str(tmp_path / "mask.png"), "--logits", str(logits), "-t", "1")
    assert r.returncode == 0, r.stderr
    assert np.load(logits).shape == (1, 1, 256, 256)
    scores, best = iou_scores(r.stdout)
    assert len(scores) == 1 and best == 0


@pytest.mark.parametrize("args, message", [
    (["-p", "200", "60"], r"point 0 at \(200, 60\) lies outside the 160x120 image; expected 0 <= x <= 160"),
    (["-p", "10", "10", "-p", "10", "-3"], r"point 1 at \(10, -3\) lies outside the 160x120 image"),
    (["-p", "10", "10", "-p", "20", "20", "-l", "1"], r"2 points \(-p\) but 1 labels \(-l\); expected one label per"),
    (["-p", "10", "10", "-l", "1", "0"], r"1 points \(-p\) but 2 labels"),
    (["--box", "50", "10", "40", "30"], r"box \(50, 10, 40, 30\) is empty: expected X0 Y0 X1 Y1 with X0 < X1"),
    (["--box", "0", "0", "161", "120"], r"box \(0, 0, 161, 120\) lies outside the 160x120 image"),
    ([], r"no prompt: give at least one point \(-p X Y\) or a box"),
    (["-p", "10", "ten"], r"argument -p/--point: expected a finite number, got 'ten'"),
    (["-p", "10", "inf"], r"argument -p/--point: expected a finite number, got 'inf'"),
    (["-p", "10", "10", "-l", "2"], r"argument -l/--label: expected 1 \(foreground\) or 0 \(background\), got '2'"),
    (["--box", "1", "2", "3"], r"argument --box: expected 4 arguments"),
])
def test_segment_refuses_bad_prompts(image_path, tmp_path, capsys, args, message):
    out = tmp_path / "mask.png"
    with pytest.raises(SystemExit) as exit_info:
        main(["segment", "-i", str(image_path), "-o", str(out), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search("segment: error: " + message, err), err
    assert not out.exists()
