"""The point grids and image crops of SAM's automatic mask generator (segment_anything.utils.amg's geometry)."""
from __future__ import annotations

import math
from itertools import product

import numpy as np


def point_grid(n_per_side: int) -> np.ndarray:
    """float64 (n * n, 2): the centres of an n x n grid over [0, 1]^2, (x, y), row by row (y outer)."""
    offset = 1 / (2 * n_per_side)
    side = np.linspace(offset, 1 - offset, n_per_side)
    return np.stack([np.tile(side[None, :], (n_per_side, 1)), np.tile(side[:, None], (1, n_per_side))],
                    axis=-1).reshape(-1, 2)


def layer_point_grids(n_per_side: int, n_layers: int, scale_per_layer: int) -> list:
    """One grid per crop layer 0..n_layers; layer i has int(n_per_side / scale_per_layer**i) points a side."""
    return [point_grid(int(n_per_side / (scale_per_layer ** i))) for i in range(n_layers + 1)]


def crop_boxes(image_size, n_layers: int, overlap_ratio: float) -> tuple[list, list]:
    """([x0, y0, x1, y1] int crops, their layer indices): the whole image, then for layer i (1-based) a
    2^i x 2^i grid of crops overlapping by overlap_ratio of the short side (scaled down per layer)."""
    h, w = image_size
    boxes, layers = [[0, 0, w, h]], [0]

    def crop_len(length, n, overlap):
        return int(math.ceil((overlap * (n - 1) + length) / n))

    for i in range(n_layers):
        n = 2 ** (i + 1)
        overlap = int(overlap_ratio * min(h, w) * (2 / n))
        cw, ch = crop_len(w, n, overlap), crop_len(h, n, overlap)
        for x0, y0 in product([int((cw - overlap) * j) for j in range(n)], [int((ch - overlap) * j) for j in range(n)]):
            boxes.append([x0, y0, min(x0 + cw, w), min(y0 + ch, h)])
            layers.append(i + 1)
    return boxes, layers


def near_crop_edge(boxes: np.ndarray, crop_box, image_box, atol: float = 20.0) -> np.ndarray:
    """Bool (N,): boxes (N, 4) XYXY in crop coordinates with an edge within atol of the crop's edge that is not
    also the image's edge (SAM's is_box_near_crop_edge)."""
    x0, y0 = crop_box[:2]
    b = (np.asarray(boxes) + np.array([x0, y0, x0, y0])).astype(np.float32)
    near_crop = np.abs(b - np.asarray(crop_box, np.float32)) <= atol
    near_image = np.abs(b - np.asarray(image_box, np.float32)) <= atol
    return np.any(near_crop & ~near_image, axis=1)
