"""SAM's automatic mask generator ("segment everything") on ggpy: mobile_sam's SamAutomaticMaskGenerator, with
the same parameters, defaults and mask records.

Per image (and per crop with crop_n_layers): encode once; decode the point grid points_per_batch single-point
prompts at a time through one planned decoder graph (grid_decoder: the image embedding stays on the backend, the
first block's work common to all prompts is done once); keep the multimask outputs whose predicted IoU passes
pred_iou_thresh; run only those through the post-processing graph (mask_stats: upscaling, thresholds, stability
counts, areas, boxes) in chunks; keep stable masks away from crop edges, run-length encode them; then box NMS
within the crop and across crops, and optionally the small-region cleanup. Skipping the upscaling of masks the IoU
filter drops anyway gives results equal to the official generator's, which upscales every mask first.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import mask_rle
from .box_nms import batched_nms
from .crops import crop_boxes, layer_point_grids, near_crop_edge
from .grid_decoder import GridDecoderGraph
from .mask_stats import MaskStatsGraph
from .predictor import Predictor
from .preprocess import preprocess, resized_shape
from .prompt_encoder import KIND_NOT_A_POINT, KIND_POSITIVE
from .regions import mask_to_box, remove_small_regions

OUTPUT_MODES = ("binary_mask", "uncompressed_rle", "coco_rle")
STAGES = ("encode", "decode", "postprocess", "nms")
MASK_THRESHOLD = 0.0          # Sam.mask_threshold


def _take(data: dict, keep) -> dict:
    """Every field of `data` (arrays and the "rles" list) at the indices or bool mask `keep`."""
    idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep, np.int64)
    return {k: [v[i] for i in idx] if isinstance(v, list) else v[idx] for k, v in data.items()}


def _cat(parts: list) -> dict:
    """Fields of several `data` dicts concatenated (an empty dict when there is none)."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    return {k: sum((p[k] for p in parts), []) if isinstance(parts[0][k], list) else np.concatenate([p[k] for p in parts])
            for k in parts[0]}


def _check(name, value, ok: bool, expected: str):
    if not ok:
        raise ValueError(f"{name} is {value!r}; expected {expected}")


class AutomaticMaskGenerator:
    """SamAutomaticMaskGenerator on ggpy: generate(image) -> a list of mask records."""

    def __init__(self, model, points_per_side: int | None = 32, points_per_batch: int = 64,
                 pred_iou_thresh: float = 0.88, stability_score_thresh: float = 0.95,
                 stability_score_offset: float = 1.0, box_nms_thresh: float = 0.7, crop_n_layers: int = 0,
                 crop_nms_thresh: float = 0.7, crop_overlap_ratio: float = 512 / 1500,
                 crop_n_points_downscale_factor: int = 1, point_grids=None, min_mask_region_area: int = 0,
                 output_mode: str = "binary_mask", chunk: int = 16, progress=None, **predictor_options):
        """model: a Predictor, or a GGUF path (a Predictor is made with predictor_options: backend, n_threads,
        dtype, ...). The other parameters are SamAutomaticMaskGenerator's. chunk: masks per evaluation of the
        post-processing graph. progress: called as progress(done, total) after every decoded batch of a crop."""
        _check("points_per_side / point_grids", (points_per_side, point_grids),
               (points_per_side is None) != (point_grids is None), "exactly one of them")
        if points_per_side is not None:
            _check("points_per_side", points_per_side, int(points_per_side) >= 1, "a positive number")
        _check("points_per_batch", points_per_batch, int(points_per_batch) >= 1, "a positive number")
        _check("chunk", chunk, int(chunk) >= 1, "a positive number")
        _check("crop_n_layers", crop_n_layers, int(crop_n_layers) >= 0, "0 or more")
        _check("crop_n_points_downscale_factor", crop_n_points_downscale_factor, crop_n_points_downscale_factor >= 1,
               "1 or more")
        _check("output_mode", output_mode, output_mode in OUTPUT_MODES, f"one of {', '.join(OUTPUT_MODES)}")
        _check("min_mask_region_area", min_mask_region_area, min_mask_region_area >= 0, "0 or more")
        self.point_grids = (layer_point_grids(int(points_per_side), int(crop_n_layers), crop_n_points_downscale_factor)
                            if points_per_side is not None else [np.asarray(g, np.float64) for g in point_grids])
        _check("point_grids", len(self.point_grids), len(self.point_grids) > int(crop_n_layers),
               f"a grid for each of the {int(crop_n_layers) + 1} crop layers")
        self.predictor = model if isinstance(model, Predictor) else Predictor(model, **predictor_options)
        self.points_per_batch, self.chunk = int(points_per_batch), int(chunk)
        self.pred_iou_thresh, self.stability_score_thresh = pred_iou_thresh, stability_score_thresh
        self.stability_score_offset, self.box_nms_thresh = stability_score_offset, box_nms_thresh
        self.crop_n_layers, self.crop_nms_thresh = int(crop_n_layers), crop_nms_thresh
        self.crop_overlap_ratio, self.min_mask_region_area = crop_overlap_ratio, min_mask_region_area
        self.output_mode, self.progress = output_mode, progress
        self.decoders = {}            # batch -> GridDecoderGraph
        self._inputs = [None, None]   # encoder inputs (3, S, S) of two crops: _prepare fills one ahead
        self.stats_graphs = {}        # (input size, crop size, batch) -> MaskStatsGraph
        self.timings = dict.fromkeys(STAGES, 0.0)

    # -- the whole image ----------------------------------------------------------------------------------------
    def generate(self, image: np.ndarray) -> list:
        """image: uint8 (H, W, 3) RGB -> mask records {"segmentation", "area", "bbox" (XYWH), "predicted_iou",
        "point_coords", "stability_score", "crop_box" (XYWH)}, as SamAutomaticMaskGenerator.generate.
        self.timings holds the seconds of each stage."""
        image = np.asarray(image)
        _check("image", f"{image.dtype} {image.shape}", image.ndim == 3 and image.shape[2] == 3
               and image.dtype == np.uint8, "a uint8 (H, W, 3) RGB array")
        self.timings = dict.fromkeys(STAGES, 0.0)
        data = self._generate_masks(image)
        if self.min_mask_region_area > 0 and data:
            t0 = time.perf_counter()
            data = self._small_regions(data, max(self.box_nms_thresh, self.crop_nms_thresh))
            self.timings["small_regions"] = time.perf_counter() - t0
        return self._records(data)

    def _generate_masks(self, image) -> dict:
        size = image.shape[:2]
        boxes, layers = crop_boxes(size, self.crop_n_layers, self.crop_overlap_ratio)
        s = self.predictor.hp.image_size
        wanted = {(resized_shape(y1 - y0, x1 - x0, s), (y1 - y0, x1 - x0)) for x0, y0, x1, y1 in boxes}
        self.stats_graphs = {k: g for k, g in self.stats_graphs.items() if k[:2] in wanted}   # this image's crop sizes
        parts = []
        with ThreadPoolExecutor(1) as ahead:    # the next crop's host pre-processing overlaps this crop's decoding
            job = ahead.submit(self._prepare, image, boxes[0], 0)
            for i, (box, layer) in enumerate(zip(boxes, layers)):
                prepared = job
                if i + 1 < len(boxes):
                    job = ahead.submit(self._prepare, image, boxes[i + 1], (i + 1) % 2)
                parts.append(self._process_crop(prepared, box, layer, size))
        data = _cat(parts)
        if len(boxes) > 1 and data:
            t0 = time.perf_counter()
            c = data["crop_boxes"]
            scores = (1.0 / ((c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1]))).astype(np.float32)   # prefer small crops
            data = _take(data, batched_nms(data["boxes"], scores, np.zeros(len(c)), self.crop_nms_thresh))
            self.timings["nms"] += time.perf_counter() - t0
        return data

    def _records(self, data: dict) -> list:
        rles = data.get("rles", [])
        if self.output_mode == "coco_rle":
            segmentations = [mask_rle.coco_rle(r) for r in rles]
        elif self.output_mode == "binary_mask":
            segmentations = [mask_rle.rle_to_mask(r) for r in rles]
        else:
            segmentations = rles

        def xywh(b):
            return [int(b[0]), int(b[1]), int(b[2] - b[0]), int(b[3] - b[1])]
        return [{"segmentation": seg, "area": mask_rle.rle_area(rle), "bbox": xywh(data["boxes"][i]),
                 "predicted_iou": float(data["iou_preds"][i]), "point_coords": [data["points"][i].tolist()],
                 "stability_score": float(data["stability_score"][i]), "crop_box": xywh(data["crop_boxes"][i])}
                for i, (seg, rle) in enumerate(zip(segmentations, rles))]

    # -- one crop -------------------------------------------------------------------------------------------------
    def _prepare(self, image, crop_box, slot: int) -> tuple:
        """(the crop's pixels, its encoder input made by preprocess in the kept buffer `slot`): host work, run a crop
        ahead in a thread (two buffers: one being uploaded, one being filled)."""
        x0, y0, x1, y1 = crop_box
        crop = np.ascontiguousarray(image[y0:y1, x0:x1])
        enc, s = self.predictor.encoder, self.predictor.hp.image_size
        if self._inputs[slot] is None:
            self._inputs[slot] = np.zeros((3, s, s), np.float32)
        return crop, preprocess(crop, s, enc.pixel_mean, enc.pixel_std, out=self._inputs[slot])

    def _process_crop(self, prepared, crop_box, layer: int, image_size) -> dict:
        """One crop's masks; prepared: the future of its _prepare."""
        x0, y0, x1, y1 = crop_box
        t0 = time.perf_counter()
        self.predictor.set_image(*prepared.result())
        self.timings["encode"] += time.perf_counter() - t0
        h, w = y1 - y0, x1 - x0
        points = self.point_grids[layer] * np.array([[w, h]])
        b = min(self.points_per_batch, len(points))      # the decoder graph's batch
        parts = []
        for n, start in enumerate(range(0, len(points), b)):
            parts.append(self._process_batch(points[start:start + b], b, crop_box, image_size))
            if self.progress is not None:
                self.progress(n + 1, -(-len(points) // b))
        data = _cat(parts)
        if not data:
            return {}
        t0 = time.perf_counter()
        data = _take(data, batched_nms(data["boxes"], data["iou_preds"], np.zeros(len(data["boxes"])),
                                       self.box_nms_thresh))
        data["boxes"] = data["boxes"] + np.array([x0, y0, x0, y0])
        data["points"] = data["points"] + np.array([x0, y0])
        data["crop_boxes"] = np.tile(np.array(crop_box, np.int64), (len(data["boxes"]), 1))
        t1 = time.perf_counter()
        self.timings["nms"] += t1 - t0
        data["rles"] = self._rles(data.pop("bits"), crop_box, image_size)     # only the masks NMS kept
        self.timings["postprocess"] += time.perf_counter() - t1
        return data

    def _decode(self, points: np.ndarray, b: int) -> np.ndarray:
        """Single positive points (n, 2) in crop pixels, n <= b -> IoU predictions (3n,) of the three multimask
        outputs, point by point, from the decoder graph of batch b, whose store then holds the masks (a partial
        batch is padded by repeating its first point)."""
        p = self.predictor
        n = len(points)
        pad = np.concatenate([points, np.repeat(points[:1], b - n, axis=0)])
        scale = np.array([p.input_size[1] / p.original_size[1], p.input_size[0] / p.original_size[0]])
        coords = np.zeros((b, 2, 2), np.float32)
        coords[:, 0] = pad * scale                                       # ResizeLongestSide.apply_coords
        kinds = np.tile(np.array([KIND_POSITIVE, KIND_NOT_A_POINT], np.int32), (b, 1))
        keep = np.tile(np.array([[1.0], [0.0]], np.float32), (b, 1, 1))
        if b not in self.decoders:
            self.decoders[b] = GridDecoderGraph(p.model, p.hp, p.backends, p.image_embedding, p.image_pe, 2, b)
        return self.decoders[b].run(coords, kinds, keep)[:n, 1:].reshape(3 * n)

    def _process_batch(self, points, batch: int, crop_box, image_size) -> dict:
        t0 = time.perf_counter()
        iou = self._decode(points, batch)
        t1 = time.perf_counter()
        self.timings["decode"] += t1 - t0
        keep = np.flatnonzero(iou > np.float32(self.pred_iou_thresh)) if self.pred_iou_thresh > 0 else \
            np.arange(len(iou))
        parts = []
        if len(keep):
            stats, m = self._stats_graph(batch), self.predictor.hp.num_mask_tokens
            parts = [self._process_chunk(stats, idx % 3 + 1 + m * (idx // 3), iou[idx], points[idx // 3], crop_box,
                                         image_size) for idx in np.array_split(keep, -(-len(keep) // self.chunk))]
        self.timings["postprocess"] += time.perf_counter() - t1
        return _cat(parts)

    def _stats_graph(self, batch: int) -> MaskStatsGraph:
        """The post-processing graph of the current crop's size reading the store of the decoder of this batch."""
        p = self.predictor
        key = (p.input_size, p.original_size, batch)
        if key not in self.stats_graphs:
            self.stats_graphs[key] = MaskStatsGraph(p.hp, p.backends, self.decoders[batch].store, p.input_size,
                                                    p.original_size, self.chunk, MASK_THRESHOLD,
                                                    self.stability_score_offset)
        return self.stats_graphs[key]

    def _process_chunk(self, stats: MaskStatsGraph, rows, iou, points, crop_box, image_size) -> dict:
        """Masks of one chunk (rows of the decoder's store) that pass the stability and crop-edge filters: iou_preds,
        points, stability_score, boxes (crop coordinates) and bits (each mask's columns of the crop, 8 pixels a byte:
        run-length encoded once the crop's NMS has kept it, _rles)."""
        s = stats.run(rows)
        with np.errstate(divide="ignore", invalid="ignore"):
            stability = s["intersections"].astype(np.float32) / s["unions"].astype(np.float32)
        keep = stability >= np.float32(self.stability_score_thresh) if self.stability_score_thresh > 0 else \
            np.ones(len(iou), bool)
        h, w = image_size
        keep &= ~near_crop_edge(s["boxes"], crop_box, [0, 0, w, h])
        idx = np.flatnonzero(keep)
        if not len(idx):
            return {}
        columns = s["binary"][idx].reshape(len(idx), -1)          # F16 0 / 1 of the crop, column by column
        return {"iou_preds": iou[idx], "points": points[idx], "stability_score": stability[idx],
                "boxes": s["boxes"][idx], "bits": list(np.packbits(columns.view(np.uint16) != 0, axis=1))}

    @staticmethod
    def _rles(bits: list, crop_box, image_size) -> list:
        """The uncompressed RLEs in the whole image of masks kept as their crop's columns packed 8 pixels a byte."""
        if not bits:
            return []
        x0, y0, x1, y1 = crop_box
        h, w = image_size
        columns = np.unpackbits(np.stack(bits), axis=1, count=(x1 - x0) * (y1 - y0)).reshape(len(bits), x1 - x0, y1 - y0)
        if (x0, y0, x1, y1) != (0, 0, w, h):
            placed = np.zeros((len(bits), w, h), np.uint8)
            placed[:, x0:x1, y0:y1] = columns
            columns = placed
        return mask_rle.columns_to_rle(columns)

    # -- small regions -------------------------------------------------------------------------------------------
    def _small_regions(self, data: dict, nms_thresh: float) -> dict:
        """SAM's postprocess_small_regions: fill small holes, drop small islands, prefer unchanged masks in a new
        box NMS, and take the changed masks' RLEs and boxes for the ones kept."""
        masks, scores = [], []
        for rle in data["rles"]:
            mask, changed_holes = remove_small_regions(mask_rle.rle_to_mask(rle), self.min_mask_region_area, "holes")
            mask, changed_islands = remove_small_regions(mask, self.min_mask_region_area, "islands")
            masks.append(mask)
            scores.append(float(not (changed_holes or changed_islands)))
        masks = np.stack(masks)
        boxes = mask_to_box(masks)
        keep = batched_nms(boxes, np.array(scores, np.float32), np.zeros(len(boxes)), nms_thresh)
        data = dict(data, rles=list(data["rles"]), boxes=data["boxes"].copy())
        for i in keep:
            if scores[i] == 0.0:
                data["rles"][i] = mask_rle.masks_to_rle(masks[i][None])[0]
                data["boxes"][i] = boxes[i]
        return _take(data, keep)
