"""MobileSAM on ggpy: `ggpy-sam` (also `python -m examples.mobilesam` from the repository root):

    ggpy-sam convert CHECKPOINT.pt -o model.gguf [--type f32|f16|bf16]
    ggpy-sam encode [-m model.gguf] [-i image.jpg|DIR ...] [-o embedding.npy|DIR] [-b cpu|cuda] [-t THREADS]
                    [--dtype f32|tf32|f16|bf16] [--batch N] [--bench N] [--tf32] [--no-cuda-graphs]
    ggpy-sam segment [-m model.gguf] [-i image.jpg] -p X Y [-p X Y ...] [-l 1|0 ...] [--box X0 Y0 X1 Y1]
                     [-o mask.png] [--composite overlay.png] [--logits logits.npy] [-b cpu|cuda] [-t THREADS]
                     [--dtype f32|tf32|f16|bf16] [--single-mask] [--tf32] [--no-cuda-graphs]
    ggpy-sam everything ...     (see everything.py)
    ggpy-sam encode-dir ...     (see jobs/encode_dir.py)

`encode` takes one or more images (-i, repeatable; a directory means every image in it), in batches of --batch
images per evaluation; with one image, or -o ending in .npy, it writes one float32 array (N, 256, 64, 64) in the
order of the images, else one <image file name>.npy per image (x.jpg -> x.jpg.npy, as encode-dir names them) into the
directory -o (two images of the same file name are refused). Outputs are written under a temporary name and renamed.
--dtype is the precision of the
encoder's activations (its weights are converted to it at load).

Without -m, `encode` and `segment` use seeded random weights in the official architecture (converted once
and cached), so they run out of the box; the embedding and the masks are then meaningless.

`segment` encodes the image once, then decodes the prompt: points (x, y) in pixels of the image, each
labelled 1 (foreground, the default) or 0 (background), and/or a box. It writes the mask with the best
predicted IoU as a PNG, optionally the image with that mask and the prompts drawn (--composite) and the
low-resolution mask logits (--logits: float32, 1 x C x 256 x 256, C = 3 masks or 1 with --single-mask),
and prints the IoU scores and the time of each step. Bad prompts end with `error: ...` and exit status 2.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import ggpy

from ..outputs import save_npy_atomic
from . import everything, render
from .convert import FILE_TYPES, convert
from .jobs import encode_dir
from .options import (IMAGE_OUTPUT, SAMPLE_IMAGE, UsageError, add_dtype_argument, check_finite, check_output,
                      checked_model, non_negative, note_cpu_half, positive)
from .predictor import Predictor, PromptError, best_mask_index, sparse_prompt
from .preprocess import IMAGE_SUFFIXES, check_image_file, load_image
from .runner import ImageEncoder, flops_per_image


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def cmd_convert(args):
    convert(args.checkpoint, args.output, type=args.type)
    print(f"wrote {args.output}")


def image_paths(inputs) -> list:
    """The -i arguments as image paths: files as given, directories as the images in them (sorted by name)."""
    paths = []
    for item in inputs or [str(SAMPLE_IMAGE)]:
        p = Path(item)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise ValueError(f"directory {p} holds no image (expected files ending in {', '.join(IMAGE_SUFFIXES)})")
            paths += found
        else:
            paths.append(p)
    return paths


def check_embedding_outputs(output: str, paths):
    """UsageError unless `output` can take the embeddings: a writable .npy file name, or a directory (not a file)
    where no two images get the same <file name>.npy."""
    if output.lower().endswith(".npy"):
        check_output("-o", output, (".npy",))
        return
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {output} is a file without the .npy suffix; expected a .npy file name or a directory")
    if out.is_dir() and not os.access(out, os.W_OK):
        raise UsageError(f"-o {output} cannot be written (permission denied)")
    first = {}
    for p in paths:
        other = first.setdefault(p.name, p)
        if other != p:
            raise UsageError(f"-i {other} and -i {p} would both be written to {out / (p.name + '.npy')}; expected "
                             "images of distinct file names with -o DIR (or -o FILE.npy for one array)")


def save_embeddings(output: str, paths, embeddings):
    """One array (N, 256, E, E) when `output` ends in .npy, else <file name>.npy per image in the directory
    `output`; each written atomically (temporary name, then renamed)."""
    if output.lower().endswith(".npy"):
        save_npy_atomic(Path(output), embeddings)
        print(f"embedding{'s' * (len(paths) > 1)} {embeddings.shape} float32 -> {output}")
        return
    out = Path(output)
    for path, e in zip(paths, embeddings):
        save_npy_atomic(out / f"{path.name}.npy", e[None])
    print(f"{len(paths)} embedding{'s' * (len(paths) > 1)} (1, {', '.join(map(str, embeddings.shape[1:]))}) float32 "
          f"-> {out}/<image file name>.npy")


def encode_all(enc, paths) -> np.ndarray:
    """Embeddings of every image, `enc.batch` per evaluation, with a progress line per batch."""
    out = []
    for start in range(0, len(paths), enc.batch):
        chunk = paths[start:start + enc.batch]
        t0 = time.perf_counter()
        images = [load_image(p, enc.hp.image_size) for p in chunk]
        out.append(check_finite(enc.encode_many(images), enc.model.path, f"the embedding of {chunk[0]}"))
        sizes = ", ".join(f"{p.name} ({im.shape[1]}x{im.shape[0]})" for p, im in zip(chunk, images))
        print(f"[{start + len(chunk)}/{len(paths)}] {sizes}: {(time.perf_counter() - t0) * 1e3:.0f} ms"
              + (" (first evaluation: includes compiling kernels not yet cached)" if start == 0 else ""))
    return np.concatenate(out)


def cmd_encode(args):
    paths = image_paths(args.image)
    for path in paths:
        check_image_file(path)
    check_embedding_outputs(args.output, paths)
    note_cpu_half(args)
    model, _ = checked_model(args.model, "the embedding is meaningless")
    t0 = time.perf_counter()
    enc = ImageEncoder(model, backend=args.backend, n_threads=args.threads, tf32=args.tf32,
                       cuda_graphs=not args.no_cuda_graphs, dtype=args.dtype, batch=min(args.batch, len(paths)))
    print(f"model {model}: {len(enc.graph.nodes)} nodes ({args.dtype}, batch {enc.batch}), planned in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms on {enc.backend}")
    print(f"planned compute memory: {_mib(enc.planned_bytes)} (all intermediates without reuse: "
          f"{_mib(enc.intermediate_bytes)}); weights {_mib(enc.model.nbytes)}")
    save_embeddings(args.output, paths, encode_all(enc, paths))
    by_stage, _ = enc.profile()
    total = sum(by_stage.values())
    d = 0 if args.backend == "cpu" else 2            # GPU stages take fractions of a millisecond
    print(f"time per stage (batch of {enc.batch}): " + ", ".join(f"{k} {v * 1e3:.{d}f} ms" for k, v in by_stage.items())
          + f"; total {total * 1e3:.{d}f} ms")
    if args.bench:
        times = np.array(enc.bench(args.bench)) * 1e3 / enc.batch
        gflops = flops_per_image(enc.hp) / 1e9
        print(f"{gflops:.1f} GFLOP per image: {gflops / np.median(times) * 1e3:.1f} GFLOP/s at the median; "
              f"times per image (one evaluation / {enc.batch}):")
        print(f"median_ms={np.median(times):.2f} min_ms={times.min():.2f} runs={args.bench}")


def _number(text: str) -> float:
    """argparse type of a prompt coordinate: a finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _label(text: str) -> int:
    """argparse type of a point label: 1 (foreground) or 0 (background)."""
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 1 (foreground) or 0 (background), got {text!r}")
    return int(text)


def prompt_arrays(points, labels, box) -> tuple:
    """(point_coords float32 (N, 2) or None, point_labels int32 (N,) or None, box float32 (4,) or None) from the
    parsed -p, -l and --box (labels default to 1); raises PromptError for a missing or inconsistent prompt."""
    if not points and box is None:
        raise PromptError("no prompt: give at least one point (-p X Y) or a box (--box X0 Y0 X1 Y1)")
    if labels and len(labels) != len(points or ()):
        raise PromptError(f"{len(points or ())} points (-p) but {len(labels)} labels (-l); expected one label per "
                          "point, or none (every point then has label 1)")
    if box is not None and not (box[0] < box[2] and box[1] < box[3]):
        raise PromptError(f"box ({', '.join(f'{v:g}' for v in box)}) is empty: expected X0 Y0 X1 Y1 with "
                          "X0 < X1 and Y0 < Y1")
    if not points:
        return None, None, np.array(box, dtype=np.float32)
    coords = np.array(points, dtype=np.float32)
    point_labels = np.array(labels or [1] * len(points), dtype=np.int32)
    return coords, point_labels, None if box is None else np.array(box, dtype=np.float32)


def _describe_prompt(coords, labels, box) -> str:
    """'2 points (1 foreground, 1 background), box (x0, y0, x1, y1)'."""
    parts = []
    if coords is not None:
        fg = int((labels == 1).sum())
        parts.append(f"{len(coords)} point{'s' * (len(coords) != 1)} ({fg} foreground, {len(coords) - fg} background)")
    if box is not None:
        parts.append(f"box ({', '.join(f'{v:g}' for v in box.tolist())})")
    return ", ".join(parts)


def cmd_segment(args):
    """Check the prompt, encode the image, predict twice (the second call times a prompt once everything is
    built and compiled), report and write the best mask."""
    coords, labels, box = prompt_arrays(args.point, args.label, args.box)
    check_output("-o", args.output, IMAGE_OUTPUT)
    if args.composite:
        check_output("--composite", args.composite, IMAGE_OUTPUT)
    if args.logits:
        check_output("--logits", args.logits, (".npy",))
    note_cpu_half(args)
    model, metadata = checked_model(args.model, "the masks are meaningless")
    image = load_image(args.image, metadata["mobilesam.image_size"])
    kinds = sparse_prompt(coords, labels, box, image.shape[:2], image.shape[:2])[1]  # checked before loading
    t0 = time.perf_counter()
    predictor = Predictor(model, backend=args.backend, n_threads=args.threads, tf32=args.tf32,
                          cuda_graphs=not args.no_cuda_graphs, dtype=args.dtype)
    enc = predictor.encoder
    print(f"model {model}: encoder {len(enc.graph.nodes)} nodes planned ({_mib(enc.planned_bytes)}), built in "
          f"{(time.perf_counter() - t0) * 1e3:.0f} ms on {enc.backend}")
    t0 = time.perf_counter()
    predictor.set_image(image)
    print(f"image {args.image} ({image.shape[1]}x{image.shape[0]}): encoded in {(time.perf_counter() - t0) * 1e3:.0f} ms"
          " (first evaluation: includes compiling kernels not yet cached)")
    print(f"prompt: {_describe_prompt(coords, labels, box)}")
    prompt = {"point_coords": coords, "point_labels": labels, "box": box, "multimask_output": not args.single_mask}
    t0 = time.perf_counter()
    masks, scores, logits = predictor.predict(**prompt)
    first = time.perf_counter() - t0
    decoder = predictor.decoder(len(kinds), False)
    print(f"decoder graph for {len(kinds)} sparse tokens: {len(decoder.graph.nodes)} nodes, planned compute memory "
          f"{_mib(sum(plan.peak_bytes for plan in decoder.plans))}; first prediction {first * 1e3:.0f} ms (builds "
          "and plans the graph, compiles kernels not yet cached)")
    predictor.predict(**prompt)              # again: the time of any later prompt of this image
    t = predictor.last_timings
    print(f"decode {t['decode'] * 1e3:.1f} ms per prompt (prompt encoder + mask decoder), post-processing "
          f"{t['postprocess'] * 1e3:.1f} ms (a second prediction, reusing the embedding and the planned graph)")
    check_finite(scores, model, "the IoU scores")
    check_finite(logits, model, "the mask logits")
    best = best_mask_index(scores)
    print("IoU scores: " + " ".join(f"{v:.4f}" for v in scores) + f"; best: mask {best} (IoU {scores[best]:.4f})")
    write_outputs(args, image, masks[best], logits, coords, labels, box)


def write_outputs(args, image, mask, logits, coords, labels, box):
    """Write the mask PNG, and the composite and the logits when asked for; print where each went."""
    render.save_mask(mask, args.output)
    print(f"mask {mask.shape[1]}x{mask.shape[0]} ({int(mask.sum())} pixels set) -> {args.output}")
    if args.composite:
        render.save_composite(args.composite, image, mask, coords, labels, box)
        print(f"overlay -> {args.composite}")
    if args.logits:
        low_res = np.ascontiguousarray(logits[None], dtype=np.float32)
        save_npy_atomic(Path(args.logits), low_res)
        print(f"mask logits {low_res.shape} float32 -> {args.logits}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ggpy-sam", description=__doc__.splitlines()[0].rstrip(":"))
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("convert", help="convert the official mobile_sam.pt into a GGUF")
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--type", choices=FILE_TYPES, default="f32")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("encode", help="compute the image embedding")
    p.add_argument("-m", "--model", help="GGUF made by `convert` (default: seeded random weights)")
    p.add_argument("-i", "--image", action="append", metavar="IMAGE|DIR",
                   help="an image, or a directory of images; repeat for more (default: the sample picture)")
    p.add_argument("-o", "--output", default="embedding.npy",
                   help="one .npy of all embeddings, or a directory for one .npy per image (default: embedding.npy)")
    p.add_argument("-b", "--backend", default="cpu")
    p.add_argument("-t", "--threads", type=int, default=None)
    add_dtype_argument(p)
    p.add_argument("--batch", type=positive, default=1, metavar="N", help="images per evaluation (default 1)")
    p.add_argument("--bench", type=non_negative, default=0, metavar="N", help="time N evaluations after a warm-up")
    p.add_argument("--tf32", action="store_true", help="CUDA: let F32 matrix products round their inputs to TF32")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="CUDA: launch every kernel from Python instead of replaying one captured CUDA graph")
    p.set_defaults(func=cmd_encode)
    add_segment_parser(sub)
    encode_dir.add_parser(sub)
    everything.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (PromptError, UsageError) as e:                # a bad prompt or output: a usage error, as argparse reports
        sub.choices[args.command].error(str(e))
    except (ggpy.GGPYError, OSError, ValueError) as e:   # bad model file, image or path: a message, no traceback
        sys.exit(f"error: {e}")


def add_segment_parser(sub):
    """The `segment` subcommand's arguments."""
    p = sub.add_parser("segment", help="masks for point and box prompts (SAM's predictor)")
    p.add_argument("-m", "--model", help="GGUF made by `convert` (default: seeded random weights)")
    p.add_argument("-i", "--image", default=str(SAMPLE_IMAGE))
    p.add_argument("-p", "--point", action="append", nargs=2, type=_number, metavar=("X", "Y"),
                   help="a point prompt in pixels of the image (repeat for more points)")
    p.add_argument("-l", "--label", action="extend", nargs="+", type=_label, metavar="1|0",
                   help="one label per point, in order: 1 foreground, 0 background (default: all 1)")
    p.add_argument("--box", nargs=4, type=_number, metavar=("X0", "Y0", "X1", "Y1"), help="a box prompt in pixels")
    p.add_argument("-o", "--output", default="mask.png", help="the best mask as a PNG (default: mask.png)")
    p.add_argument("--composite", metavar="overlay.png", help="also write the image with the mask and prompts drawn")
    p.add_argument("--logits", metavar="logits.npy", help="also save the low-resolution mask logits (1, C, 256, 256)")
    p.add_argument("--single-mask", action="store_true", help="predict one mask instead of three (multimask off)")
    p.add_argument("-b", "--backend", default="cpu")
    p.add_argument("-t", "--threads", type=int, default=None)
    add_dtype_argument(p)
    p.add_argument("--tf32", action="store_true", help="CUDA: let F32 matrix products round their inputs to TF32")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="CUDA: launch every kernel from Python instead of replaying captured CUDA graphs")
    p.set_defaults(func=cmd_segment)

