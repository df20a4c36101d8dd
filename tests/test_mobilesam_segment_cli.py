"""MobileSAM's `segment` command (seeded random weights, no torch) and the mask / overlay rendering."""
import numpy as np
import pytest
from PIL import Image

from examples.mobilesam import render


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
