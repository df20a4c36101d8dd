"""Non-maximum suppression of boxes, as torchvision's nms / batched_nms compute it (float32 boxes and IoUs)."""
from __future__ import annotations

import numpy as np


def box_iou(boxes: np.ndarray) -> np.ndarray:
    """float32 (N, N) IoUs of XYXY boxes (N, 4) (areas (x1 - x0) * (y1 - y0), no +1, as torchvision)."""
    b = np.asarray(boxes, np.float32)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = np.maximum(b[:, None, :2], b[None, :, :2])
    rb = np.minimum(b[:, None, 2:], b[None, :, 2:])
    wh = np.maximum(rb - lt, np.float32(0))
    inter = wh[..., 0] * wh[..., 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area[:, None] + area[None, :] - inter)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices (int64) of the boxes kept, highest score first: a box is dropped when its IoU with a kept box of a
    higher score (earlier on ties) exceeds iou_threshold."""
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    over = box_iou(np.asarray(boxes)[order]).astype(np.float64) > iou_threshold
    dropped = np.zeros(len(order), bool)
    keep = []
    for i in range(len(order)):
        if not dropped[i]:
            keep.append(i)
            dropped |= over[i]
    return order[np.array(keep, np.int64)]


def batched_nms(boxes: np.ndarray, scores: np.ndarray, categories: np.ndarray, iou_threshold: float) -> np.ndarray:
    """nms within each category: boxes of different categories never suppress each other. Indices kept, highest
    score first."""
    boxes = np.asarray(boxes, np.float64)
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    offset = np.asarray(categories, np.float64)[:, None] * (boxes.max() + 1)
    return nms(boxes + offset, scores, iou_threshold)
