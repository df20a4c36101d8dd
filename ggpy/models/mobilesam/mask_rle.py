"""Run-length encodings of binary masks, as SAM's automatic mask generator and COCO write them.

An uncompressed RLE is {"size": [h, w], "counts": [int, ...]}: run lengths of the mask read in column-major
(Fortran) order, starting with a run of zeros (0 when the first pixel is set). A COCO RLE has the same size and the
counts as pycocotools' compressed string (6 bits a character, from ASCII 48, each count after the second stored as
the difference to the count two before).
"""
from __future__ import annotations

import numpy as np


def masks_to_rle(masks: np.ndarray) -> list:
    """Bool masks (N, H, W) -> N uncompressed RLEs (SAM's mask_to_rle_pytorch)."""
    return columns_to_rle(masks.transpose(0, 2, 1))


def columns_to_rle(columns: np.ndarray) -> list:
    """Masks stored column by column, (N, W, H) of 0 / 1 (any dtype), -> N uncompressed RLEs of the (H, W) masks, with
    no Python loop over pixels: one pass finds every change of value, flat over all masks (a 2-D nonzero is
    several times slower)."""
    n, w, h = columns.shape
    size = w * h
    flat = columns.reshape(n, size)
    if flat.dtype == np.float16:
        flat = flat.view(np.uint16)                 # 0 and 1 by their bits: numpy compares halves slowly
    at = np.flatnonzero(flat[:, 1:] != flat[:, :-1])                # changes of mask i at i (size - 1) + pixel
    bounds = np.searchsorted(at, np.arange(n + 1) * (size - 1))
    first = flat[:, 0] != 0
    out = []
    for i in range(n):
        edges = np.concatenate(([0], at[bounds[i]:bounds[i + 1]] - (i * (size - 1) - 1), [size]))
        out.append({"size": [h, w], "counts": ([0] if first[i] else []) + np.diff(edges).tolist()})
    return out


def rle_to_mask(rle: dict) -> np.ndarray:
    """An uncompressed RLE -> bool mask (H, W)."""
    h, w = rle["size"]
    values = np.arange(len(rle["counts"])) % 2 == 1
    return np.repeat(values, rle["counts"]).reshape(w, h).T


def rle_area(rle: dict) -> int:
    """Pixels set in the mask of an uncompressed RLE."""
    return int(sum(rle["counts"][1::2]))


def coco_string(counts) -> str:
    """pycocotools' compressed form of RLE counts (rleToString): LEB128-like, 5 bits of value a character."""
    chars = []
    for i, count in enumerate(counts):
        x = int(count) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            chars.append(chr(48 + (c | 0x20 if more else c)))
    return "".join(chars)


def coco_rle(rle: dict) -> dict:
    """An uncompressed RLE -> COCO RLE {"size": [h, w], "counts": str} (SAM's coco_encode_rle)."""
    return {"size": list(rle["size"]), "counts": coco_string(rle["counts"])}
