"""Pictures of a segmentation: a mask as a PNG, and the image with the mask, its outline and the prompts drawn.

Images are uint8 RGB arrays of shape (H, W, 3), masks bool arrays of shape (H, W); prompt coordinates are
(x, y) pixels of the image, as SAM's predictor takes them. Blending is numpy; Pillow writes the files and
draws the points and the box.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

MASK_COLOR = (30, 144, 255)
POINT_COLORS = {1: (0, 200, 0), 0: (230, 0, 0)}       # positive (foreground) and negative (background) points
BOX_COLOR = (255, 215, 0)


def _check_mask(mask: np.ndarray, shape: tuple | None = None) -> np.ndarray:
    """`mask` as a bool (H, W) array; with `shape`, it must be (H, W) of that image."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.ndim != 2:
        raise ValueError(f"a mask must be a bool array of shape (H, W); got {mask.dtype} {mask.shape}")
    if shape is not None and mask.shape != tuple(shape[:2]):
        raise ValueError(f"the mask has shape {mask.shape}; expected the image's (H, W) = {tuple(shape[:2])}")
    return mask


def mask_image(mask: np.ndarray) -> Image.Image:
    """A mode "L" image of a bool (H, W) mask: 255 inside, 0 outside."""
    return Image.fromarray(_check_mask(mask).astype(np.uint8) * 255, mode="L")


def save_mask(mask: np.ndarray, path) -> None:
    """Write a bool (H, W) mask to `path` as a greyscale PNG (255 inside, 0 outside)."""
    mask_image(mask).save(path, format="PNG")


def outline(mask: np.ndarray) -> np.ndarray:
    """Bool (H, W): the pixels of `mask` that touch (4-neighbourhood) a pixel outside it or the image edge."""
    mask = _check_mask(mask)
    padded = np.pad(mask, 1, constant_values=False)
    interior = padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
    return mask & ~interior


def blend(image: np.ndarray, mask: np.ndarray, color=MASK_COLOR, alpha: float = 0.5) -> np.ndarray:
    """uint8 (H, W, 3): `image` with `color` laid over the pixels of `mask` at opacity `alpha` (0..1)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"an image must be uint8 RGB of shape (H, W, 3); got {image.dtype} {image.shape}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be between 0 and 1; got {alpha}")
    mask = _check_mask(mask, image.shape)
    out = image.copy()
    tinted = (1.0 - alpha) * image[mask] + alpha * np.asarray(color, dtype=np.float64)
    out[mask] = np.round(tinted).astype(np.uint8)
    return out


def _marker_radius(height: int, width: int) -> int:
    """Radius of a point marker: about 1% of the longer side, at least 3 pixels."""
    return max(3, round(max(height, width) / 100))


def composite(image: np.ndarray, mask: np.ndarray, points=None, labels=None, box=None, color=MASK_COLOR,
              alpha: float = 0.5) -> np.ndarray:
    """uint8 (H, W, 3): `image` with `mask` blended in `color`, its outline opaque, the prompt points as
    discs (green: label 1, red: label 0, white rim) and the box (x0, y0, x1, y1) as a rectangle."""
    out = blend(image, mask, color, alpha)
    out[outline(mask)] = color
    points = np.zeros((0, 2)) if points is None else np.asarray(points, dtype=np.float64).reshape(-1, 2)
    labels = np.ones(len(points), dtype=int) if labels is None else np.asarray(labels).reshape(-1)
    if len(labels) != len(points):
        raise ValueError(f"{len(points)} points but {len(labels)} labels; expected one label per point")
    picture = Image.fromarray(out)
    draw = ImageDraw.Draw(picture)
    h, w = out.shape[:2]
    if box is not None:
        x0, y0, x1, y1 = (float(v) for v in box)
        draw.rectangle((x0, y0, x1, y1), outline=BOX_COLOR, width=max(1, _marker_radius(h, w) // 2))
    r = _marker_radius(h, w)
    for (x, y), label in zip(points, labels):
        if int(label) not in POINT_COLORS:
            raise ValueError(f"point ({x:g}, {y:g}) has label {label}; expected 1 (foreground) or 0 (background)")
        draw.ellipse((x - r, y - r, x + r, y + r), fill=POINT_COLORS[int(label)], outline=(255, 255, 255))
    return np.asarray(picture)


def save_composite(path, image: np.ndarray, mask: np.ndarray, points=None, labels=None, box=None) -> None:
    """Write `composite(image, mask, points, labels, box)` to `path` (format from the file name's extension)."""
    Image.fromarray(composite(image, mask, points, labels, box)).save(path)
