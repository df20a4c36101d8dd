"""SAM's image pre-processing with Pillow and numpy: resize the longest side, normalise, pad (no torch).

Reproduces SamPredictor.set_image: ResizeLongestSide.apply_image (torchvision's resize of a PIL image,
i.e. Pillow's bilinear resize) followed by Sam.preprocess ((x - mean) / std in float32, zero padding at the
bottom and right).
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

PIXEL_MEAN = (123.675, 116.28, 103.53)
PIXEL_STD = (58.395, 57.12, 57.375)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
"""The file names taken as images where a directory is given (encode -i DIR, encode-dir)."""


def load_image(path) -> np.ndarray:
    """The image at `path` as uint8 RGB of shape (H, W, 3), EXIF orientation applied (as cv2.imread does)."""
    try:
        with Image.open(path) as im:
            return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    except FileNotFoundError:
        raise FileNotFoundError(f"image {path} does not exist") from None
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"cannot read {path} as an image ({e}); expected a JPEG, PNG or other Pillow format") from None


def resized_shape(h: int, w: int, long_side: int) -> tuple:
    """(new_h, new_w) with the longest side `long_side`, rounded as ResizeLongestSide.get_preprocess_shape."""
    scale = long_side * 1.0 / max(h, w)
    return int(h * scale + 0.5), int(w * scale + 0.5)


def resize_longest_side(image: np.ndarray, long_side: int = 1024) -> np.ndarray:
    """uint8 (H, W, 3) or one channel (H, W) resized (Pillow bilinear) so that its longest side is `long_side`.
    Pillow resizes every channel with the same integer arithmetic, so a channel resized alone equals that channel of
    the RGB image resized."""
    new_h, new_w = resized_shape(image.shape[0], image.shape[1], long_side)
    if (new_h, new_w) == image.shape[:2]:       # already resized (Pillow would return a copy)
        return image
    return np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BILINEAR))


def preprocess(image: np.ndarray, image_size: int = 1024, pixel_mean=PIXEL_MEAN, pixel_std=PIXEL_STD,
               out: np.ndarray | None = None) -> np.ndarray:
    """float32 (3, image_size, image_size) encoder input (ggml ne (image_size, image_size, 3)) from a uint8
    RGB (H, W, 3) image: resized, normalised per channel, zero-padded at the bottom and right. out: an array of
    that shape and type to write into (a buffer kept across images: no fresh pages to fault in each time). The three
    channels are resized and normalised on three threads (the 769 x 770 sample took ~15 ms to resize as RGB, ~7 ms a
    channel, and ~6 ms to normalise on one thread here)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"preprocess expects a uint8 RGB image of shape (H, W, 3), got {image.dtype} {image.shape}")
    h, w = resized_shape(image.shape[0], image.shape[1], image_size)
    levels = np.arange(256, dtype=np.float32)
    out = np.empty((3, image_size, image_size), dtype=np.float32) if out is None else out
    out[:, h:], out[:, :h, w:] = 0, 0

    def channel(c: int):    # a table of (level - mean) / std: the float32 arithmetic, done 256 times, gathered
        plane = resize_longest_side(np.ascontiguousarray(image[:, :, c]), image_size)
        out[c, :h, :w] = ((levels - np.float32(pixel_mean[c])) / np.float32(pixel_std[c])).take(plane)
    list(_channel_threads().map(channel, range(3)))     # Pillow and numpy let go of the GIL: the channels side by side
    return out


@functools.cache
def _channel_threads() -> ThreadPoolExecutor:
    """preprocess's three threads (one per channel), made at the first use."""
    return ThreadPoolExecutor(3, thread_name_prefix="preprocess")
