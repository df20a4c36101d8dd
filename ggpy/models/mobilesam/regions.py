"""SAM's small-region cleanup (remove_small_regions), with SciPy's connected components (8-connectivity, as the
official code's cv2.connectedComponentsWithStats) instead of OpenCV."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

EIGHT_CONNECTED = np.ones((3, 3), bool)


def remove_small_regions(mask: np.ndarray, area_thresh: float, mode: str) -> tuple[np.ndarray, bool]:
    """(mask, changed): bool mask (H, W) with its holes (mode "holes") or islands ("islands") smaller than
    area_thresh pixels removed; when every island is small, the largest stays."""
    if mode not in ("holes", "islands"):
        raise ValueError(f"mode must be 'holes' or 'islands', got {mode!r}")
    holes = mode == "holes"
    regions, n = ndimage.label(holes ^ mask, structure=EIGHT_CONNECTED)
    sizes = np.bincount(regions.ravel(), minlength=n + 1)[1:]
    small = [i + 1 for i, s in enumerate(sizes) if s < area_thresh]
    if not small:
        return mask, False
    fill = [0] + small
    if not holes:
        fill = [i for i in range(n + 1) if i not in fill] or [int(np.argmax(sizes)) + 1]
    return np.isin(regions, fill), True


def mask_to_box(masks: np.ndarray) -> np.ndarray:
    """int64 (N, 4) XYXY boxes of bool masks (N, H, W): first and last set column and row ([0, 0, 0, 0] for an
    empty mask), as SAM's batched_mask_to_box."""
    rows, cols = masks.any(axis=2), masks.any(axis=1)
    h, w = masks.shape[1:]
    boxes = np.stack([cols.argmax(1), rows.argmax(1), w - 1 - cols[:, ::-1].argmax(1),
                      h - 1 - rows[:, ::-1].argmax(1)], axis=1).astype(np.int64)
    boxes[~rows.any(axis=1)] = 0
    return boxes
