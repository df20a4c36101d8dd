"""SAM's image pre-processing with Pillow and numpy: resize the longest side, normalise, pad (no torch).

Reproduces SamPredictor.set_image: ResizeLongestSide.apply_image (torchvision's resize of a PIL image,
i.e. Pillow's bilinear resize) followed by Sam.preprocess ((x - mean) / std in float32, zero padding at the
bottom and right).
"""
from __future__ import annotations

import functools
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

PIXEL_MEAN = (123.675, 116.28, 103.53)
PIXEL_STD = (58.395, 57.12, 57.375)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
"""The file names taken as images where a directory is given (encode -i DIR, encode-dir)."""


def load_image(path, long_side: int | None = None) -> np.ndarray:
    """The image at `path` as uint8 RGB of shape (H, W, 3), EXIF orientation applied (as cv2.imread does); 16-bit
    greyscale scaled to 8 bits (value >> 8, as OpenCV does). ValueError (naming the file) for a file that is not a
    regular file (a FIFO would block the open), not an image, over Pillow's decompression-bomb limit, or (with
    `long_side`) so thin that resizing its longest side to `long_side` leaves a side of 0 pixels."""
    check_image_file(path)
    try:
        with Image.open(path) as im:
            image = to_rgb(ImageOps.exif_transpose(im))
    except Image.DecompressionBombError as e:
        raise ValueError(f"image {path} is too large to decode ({e}); expected at most {Image.MAX_IMAGE_PIXELS} "
                         "pixels") from None
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"cannot read {path} as an image ({e}); expected a JPEG, PNG or other Pillow format") from None
    if long_side is not None and min(resized_shape(*image.shape[:2], long_side)) < 1:
        new_h, new_w = resized_shape(*image.shape[:2], long_side)
        raise ValueError(f"image {path} is {image.shape[1]}x{image.shape[0]}: resized to {long_side} pixels on its "
                         f"longest side it would be {new_w}x{new_h}; expected sides at least 1 pixel after resizing")
    return image


def check_image_file(path):
    """FileNotFoundError when `path` does not exist, ValueError when it is no regular file (opening a FIFO blocks)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"image {path} does not exist")
    if not os.path.isfile(path):
        raise ValueError(f"image {path} is {file_kind(path)}; expected an image file")


def to_rgb(im: Image.Image) -> np.ndarray:
    """uint8 (H, W, 3) of a Pillow image; 16- and 32-bit greyscale (modes I;16*, I) keep their top 8 of 16 bits
    (Pillow's own conversion clips them at 255)."""
    if im.mode == "I" or im.mode.startswith("I;16"):
        grey = (np.clip(np.asarray(im).astype(np.int64), 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    return np.asarray(im.convert("RGB"))


def file_kind(path) -> str:
    """What a path that is no regular file is: 'a directory', 'a FIFO', 'a character device', ..."""
    mode = os.stat(path).st_mode
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


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
