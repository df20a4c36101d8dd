"""`ggpy-sam everything`: masks of every object in an image (SAM's automatic mask generator).

    ggpy-sam everything [-m model.gguf] -i image.jpg -o masks.json [--overlay overlay.png]
        [--points-per-side 32] [--points-per-batch 64] [--pred-iou-thresh 0.88] [--stability-score-thresh 0.95]
        [--box-nms-thresh 0.7] [--crop-n-layers 0] [--min-mask-region-area 0] [-b cpu|cuda] [-t THREADS]

Writes a JSON list with one record per mask in SAM's coco_rle output form (segmentation = {"size": [h, w],
"counts": str}, area, bbox XYWH, predicted_iou, point_coords, stability_score, crop_box XYWH), optionally an
overlay PNG (every mask in its own colour with its outline), and prints the number of masks and the time of each
stage, with a progress bar over the decoded batches. Bad arguments end with `error: ...` and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from . import render
from .options import IMAGE_OUTPUT, add_dtype_argument, check_output, checked_model, note_cpu_half
from .automatic import AutomaticMaskGenerator
from .crops import crop_boxes
from .mask_rle import coco_rle, rle_to_mask
from .preprocess import load_image


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value
    return parse


def _fraction(text: str) -> float:
    """argparse type of a threshold: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def _backend(text: str) -> str:
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


def add_parser(sub):
    """The `everything` subcommand's arguments."""
    p = sub.add_parser("everything", help="masks of every object in an image (SAM's automatic mask generator)")
    p.add_argument("-m", "--model", help="GGUF made by `convert` (default: seeded random weights)")
    p.add_argument("-i", "--image", required=True)
    p.add_argument("-o", "--output", required=True, metavar="masks.json", help="the mask records as JSON (coco_rle)")
    p.add_argument("--overlay", metavar="overlay.png", help="also write the image with every mask drawn")
    p.add_argument("--points-per-side", type=_int_at_least(1), default=32)
    p.add_argument("--points-per-batch", type=_int_at_least(1), default=64)
    p.add_argument("--pred-iou-thresh", type=_fraction, default=0.88)
    p.add_argument("--stability-score-thresh", type=_fraction, default=0.95)
    p.add_argument("--box-nms-thresh", type=_fraction, default=0.7)
    p.add_argument("--crop-n-layers", type=_int_at_least(0), default=0)
    p.add_argument("--min-mask-region-area", type=_int_at_least(0), default=0)
    p.add_argument("-b", "--backend", type=_backend, default="cpu")
    p.add_argument("-t", "--threads", type=_int_at_least(1), default=None)
    add_dtype_argument(p)
    p.set_defaults(func=cmd_everything, parser=p)


def _check_paths(args):
    """Refuse (exit status 2) an image or model that does not exist and outputs that cannot be written (a directory,
    a missing or read-only folder, an overlay Pillow cannot save by its suffix)."""
    for what, path in (("image", args.image), ("model", args.model)):
        if path is not None and not Path(path).exists():
            args.parser.error(f"{what} {path} does not exist")
    check_output("-o", args.output)
    if args.overlay:
        check_output("--overlay", args.overlay, IMAGE_OUTPUT)


LOTS_OF_POINTS = 16 * 32 * 32
"""Prompt points above which `everything` warns (16x the default 32 x 32 grid with no crop layers)."""


def warn_about_work(args):
    """A warning on stderr when --points-per-side and --crop-n-layers ask for far more points than the default."""
    points = args.points_per_side ** 2 * sum(4 ** layer for layer in range(args.crop_n_layers + 1))  # 4^l crops
    if points > LOTS_OF_POINTS:
        print(f"warning: --points-per-side {args.points_per_side} with --crop-n-layers {args.crop_n_layers} decodes "
              f"{points:,} prompt points ({points / (32 * 32):,.0f}x the default 32 x 32 grid): this will take "
              "that much longer", file=sys.stderr)


def overlay(image: np.ndarray, masks: list, alpha: float = 0.45, seed: int = 0) -> np.ndarray:
    """uint8 (H, W, 3): the image with bool masks (H, W) blended in, the largest first, each in its own colour with
    its outline opaque."""
    out = image.astype(np.float32)
    colours = np.random.default_rng(seed).integers(40, 256, (len(masks), 3)).astype(np.float32)
    for i in np.argsort([-m.sum() for m in masks], kind="stable"):
        m = masks[i]
        out[m] = (1 - alpha) * out[m] + alpha * colours[i]
        out[render.outline(m)] = colours[i]
    return np.round(out).astype(np.uint8)


def _batches(generator: AutomaticMaskGenerator, size) -> int:
    """Decoded batches of one image: over every crop, its grid's points in batches of points_per_batch."""
    _, layers = crop_boxes(size, generator.crop_n_layers, generator.crop_overlap_ratio)
    return sum(-(-len(generator.point_grids[layer]) // generator.points_per_batch) for layer in layers)


def cmd_everything(args):
    _check_paths(args)
    warn_about_work(args)
    note_cpu_half(args)
    model, metadata = checked_model(args.model, "the masks are meaningless")
    image = load_image(args.image, metadata["mobilesam.image_size"])
    t0 = time.perf_counter()
    generator = AutomaticMaskGenerator(
        model, points_per_side=args.points_per_side, points_per_batch=args.points_per_batch,
        pred_iou_thresh=args.pred_iou_thresh, stability_score_thresh=args.stability_score_thresh,
        box_nms_thresh=args.box_nms_thresh, crop_n_layers=args.crop_n_layers,
        min_mask_region_area=args.min_mask_region_area, output_mode="uncompressed_rle",
        progress=lambda done, total: bar.update(1), backend=args.backend, n_threads=args.threads, dtype=args.dtype)
    print(f"model {model} on {generator.predictor.encoder.backend}: built in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    h, w = image.shape[:2]
    bar = tqdm(total=_batches(generator, (h, w)), unit="batch", desc="decoding", leave=False)
    print(f"image {args.image} ({w}x{h}): {len(generator.point_grids[0])} points (crop layer 0), "
          f"{bar.total} batch{'es' * (bar.total != 1)} of up to {args.points_per_batch} points")
    t0 = time.perf_counter()
    records = generator.generate(image)
    total = time.perf_counter() - t0
    bar.close()
    with open(args.output, "w") as f:
        json.dump([dict(r, segmentation=coco_rle(r["segmentation"])) for r in records], f)
    print(f"{len(records)} masks -> {args.output}")
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in generator.timings.items())
    print(f"time per stage: {stages}; total {total:.2f} s (the first run includes compiling kernels not yet cached)")
    if args.overlay:
        masks = [rle_to_mask(r["segmentation"]) for r in records]
        Image.fromarray(overlay(image, masks)).save(args.overlay)
        print(f"overlay -> {args.overlay}")
