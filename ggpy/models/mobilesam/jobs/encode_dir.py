"""`encode-dir`: the embedding of every image under a directory, in-process or on Ray; resumable.

    ggpy-sam encode-dir IMAGES/ -o EMBEDDINGS/ [-m model.gguf] [-b cpu|cuda] [--batch N]
                        [-t THREADS] [--dtype f32|tf32|f16|bf16] [--ray [ADDRESS]]

Every image under IMAGES (recursively) gets EMBEDDINGS/<its relative path>.npy (float32 1x256x64x64, as `encode`
writes it), written under a temporary name and renamed, and a row in EMBEDDINGS/manifest.jsonl: image, output,
status (ok, unreadable or failed), error, seconds (reading, its share of the batch's evaluation, writing). A rerun
skips the images whose .npy exists and those recorded unreadable (delete a row to retry its image), and does the
rest. Exit status 0 when every readable image was encoded, else 1; a summary line ends the run.
"""
from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..options import add_dtype_argument, model_or_random, positive
from ..preprocess import IMAGE_SUFFIXES
from .batch import BatchEncoder, JobError, output_name, per_call, read_image
from .encode_dir_ray import stream_on_ray

MANIFEST = "manifest.jsonl"
STATUSES = ("ok", "unreadable", "failed")


def walk_files(root: Path):
    """Relative POSIX paths of the files under `root` (os.walk: no stat per file, which counts on shared storage)."""
    for folder, _, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        yield from ((rel / f).as_posix() for f in files)


def find_images(root: Path) -> list:
    """Relative POSIX paths of the image files under `root`, recursively, sorted."""
    return sorted(f for f in walk_files(root) if Path(f).suffix.lower() in IMAGE_SUFFIXES)


class Manifest:
    """EMBEDDINGS/manifest.jsonl: one JSON row per image handled, appended one write at a time (a killed job
    leaves at most a partial last line, dropped when the manifest is opened again)."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = {}                       # image -> its last row
        if path.exists():
            self._load()

    def _load(self):
        data = self.path.read_bytes()
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) < len(data):        # the partial row of a killed job
            os.truncate(self.path, len(complete))
        for n, line in enumerate(complete.decode().splitlines(), 1):
            try:
                row = json.loads(line)
                self.rows[row["image"]] = row
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{self.path} line {n} is not a manifest row: {line[:80]!r}; expected JSON with "
                                 "image, output, status, error, seconds (move the file away to start afresh)") from None

    def append(self, rows: list):
        """Append `rows` (dicts) in one write."""
        if not rows:
            return
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        for r in rows:
            self.rows[r["image"]] = r


def row(image: str, status: str, error: str | None = None, seconds: float | None = None) -> dict:
    """A manifest row."""
    return {"image": image, "output": output_name(image) if status == "ok" else None, "status": status,
            "error": error, "seconds": None if seconds is None else round(seconds, 4)}


def existing_outputs(out_dir: Path) -> set:
    """The .npy files under `out_dir` (relative paths); deletes the temporaries (.<name>.npy.<id>.tmp) that a
    killed job left."""
    found = set()
    for f in walk_files(out_dir):
        if fnmatch.fnmatch(f.rpartition("/")[2], ".*.npy.*.tmp"):
            (out_dir / f).unlink(missing_ok=True)
        elif f.endswith(".npy"):
            found.add(f)
    return found


def plan_job(images_dir: Path, out_dir: Path) -> tuple:
    """(manifest, images to do, {status: images skipped}): the images encoded (their .npy exists; recorded when a
    killed job wrote the .npy but not its row) and those recorded unreadable are skipped."""
    if not images_dir.is_dir():
        raise ValueError(f"IMAGES {images_dir} is not a directory; expected a directory of images")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"-o {out_dir} is a file; expected a directory for the embeddings (created if missing)")
    images = find_images(images_dir)
    if not images:
        raise ValueError(f"{images_dir} holds no image (expected files ending in {', '.join(IMAGE_SUFFIXES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = existing_outputs(out_dir)
    manifest = Manifest(out_dir / MANIFEST)
    done = {im for im in images if output_name(im) in outputs}
    manifest.append([row(im, "ok") for im in sorted(done) if manifest.rows.get(im, {}).get("status") != "ok"])
    bad = {im for im in images if manifest.rows.get(im, {}).get("status") == "unreadable"} - done
    return manifest, [im for im in images if im not in done | bad], {"ok": len(done), "unreadable": len(bad)}


def to_columns(items: list) -> dict:
    """Rows (dicts of equal keys) -> columns, as Ray Data hands a batch to BatchEncoder."""
    return {k: np.asarray([r[k] for r in items], dtype=object) for k in items[0]}


def stream_in_process(items: list, settings: dict, prep: dict, readers: int = min(8, os.cpu_count() or 1)):
    """Manifest-row columns per call of one BatchEncoder in this process (loaded and planned before returning);
    `readers` threads read and pre-process the next images while it works, per_call + readers images in memory
    at most."""
    return _read_and_encode(BatchEncoder(**settings), items, prep, readers, per_call(settings))


def _read_and_encode(encoder: BatchEncoder, items: list, prep: dict, readers: int, call: int):
    ahead = call + readers
    with ThreadPoolExecutor(readers) as pool:
        pending = deque(pool.submit(read_image, it, prep) for it in items[:ahead])
        queued = len(pending)
        while pending:
            batch = [pending.popleft().result() for _ in range(min(call, len(pending)))]
            pending.extend(pool.submit(read_image, it, prep) for it in items[queued:queued + len(batch)])
            queued += len(batch)
            yield encoder(to_columns(batch))


def input_params(model: str) -> dict:
    """The pre-processing of the model's encoder (image_size, pixel_mean, pixel_std) from its metadata; checks the
    file before any encoder loads it."""
    from ggpy.model_file import open_gguf
    fields = open_gguf(model).fields
    names = ("image_size", "pixel_mean", "pixel_std")
    missing = [n for n in names if f"mobilesam.{n}" not in fields]
    if missing:
        raise ValueError(f"{model} has no mobilesam.{', mobilesam.'.join(missing)}: expected a GGUF made by `convert`")
    return {n: fields[f"mobilesam.{n}"].contents() for n in names}


def run(args) -> int:
    """The job: plan, stream batches (in-process or on Ray), record every row, print the summary; exit status."""
    images_dir, out_dir = Path(args.images).resolve(), Path(args.output).resolve()
    manifest, todo, before = plan_job(images_dir, out_dir)
    counts = dict.fromkeys(STATUSES, 0)
    t0 = time.perf_counter()
    if todo:                                  # else nothing to load or start
        model = str(Path(model_or_random(args.model, "the embeddings are meaningless")).resolve())
        prep = input_params(model)
        settings = {"model": model, "out_dir": str(out_dir), "backend": args.backend, "threads": args.threads,
                    "dtype": args.dtype, "batch": args.batch}
        items = [{"image": im, "path": str(images_dir / im)} for im in todo]
        try:
            if args.ray is None:
                batches = stream_in_process(items, settings, prep)
            else:
                batches = stream_on_ray(items, settings, prep, args.ray)
            record(batches, manifest, counts, len(todo))
        except JobError as e:
            print(f"error: {e}", file=sys.stderr)
        except KeyboardInterrupt:
            print("interrupted: run the same command again to encode the rest", file=sys.stderr)
    summary(counts, before, time.perf_counter() - t0, manifest)
    return 0 if counts["failed"] == 0 and sum(counts.values()) == len(todo) else 1


def record(batches, manifest: Manifest, counts: dict, total: int):
    """Append each batch's rows to the manifest as it arrives; a progress bar with images/s on stderr."""
    with tqdm(total=total, unit="img", desc="encode-dir", dynamic_ncols=True) as bar:
        for cols in batches:
            rows = [row(im, st, err or None, sec) for im, st, err, sec in
                    zip(cols["image"], cols["status"], cols["error"], cols["seconds"])]
            manifest.append(rows)
            for r in rows:
                counts[r["status"]] += 1
                if r["error"]:
                    bar.write(f"{r['status']}: {r['image']}: {r['error']}", file=sys.stderr)
            bar.update(len(rows))


def summary(counts: dict, before: dict, elapsed: float, manifest: Manifest):
    """The last line: what this run did, its rate (model loading and start-up included), what earlier runs did."""
    rate = counts["ok"] / elapsed if elapsed > 0 else 0.0
    print(f"encode-dir: {counts['ok']} encoded, {counts['unreadable']} unreadable, {counts['failed']} failed in "
          f"{elapsed:.1f} s ({rate:.2f} images/s); earlier runs: {before['ok']} encoded, {before['unreadable']} "
          f"unreadable; manifest {manifest.path}")


def add_parser(sub):
    """Register the `encode-dir` subcommand."""
    p = sub.add_parser("encode-dir", help="embeddings of every image under a directory (resumable; Ray optional)",
                       description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("images", metavar="IMAGES", help="directory of images (searched recursively)")
    p.add_argument("-o", "--output", required=True, metavar="EMBEDDINGS",
                   help="directory for <relative path>.npy and manifest.jsonl (created if missing)")
    p.add_argument("-m", "--model", help="GGUF made by `convert` (default: seeded random weights)")
    p.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--batch", type=positive, default=1, metavar="N", help="images per evaluation (default 1)")
    p.add_argument("-t", "--threads", type=positive, default=None,
                   help="threads per encoder (default: every core in-process; 1 per Ray actor on the CPU)")
    add_dtype_argument(p)
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray: a local cluster, or the one at ADDRESS (auto, HOST:6379, ray://HOST:10001); "
                        "put it after IMAGES, or write --ray=ADDRESS")
    p.set_defaults(func=lambda args: sys.exit(run(args)))
