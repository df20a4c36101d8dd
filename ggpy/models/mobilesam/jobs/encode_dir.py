"""`encode-dir`: the embedding of every image under a directory, in-process or on Ray; resumable.

    ggpy-sam encode-dir IMAGES/ -o EMBEDDINGS/ [-m model.gguf] [-b cpu|cuda] [--batch N]
                        [-t THREADS] [--dtype f32|tf32|f16|bf16] [--ray [ADDRESS]]

Every image under IMAGES (recursively) gets EMBEDDINGS/<its relative path>.npy (float32 1x256x64x64, as `encode`
writes it), written under a temporary name and renamed, and a row in EMBEDDINGS/manifest.jsonl: image, output,
status (ok, unreadable or failed), error, seconds (reading, its share of the batch's evaluation, writing). A rerun
skips the images whose .npy exists (an array of the embedding's shape, by its header and size) and those recorded
unreadable (delete a row to retry its image), and does the rest. Exit status 0 when every readable image was
encoded, else 1; a summary line ends the run. One job per EMBEDDINGS at a time: a job holds EMBEDDINGS/.encode-dir.lock
(an flock) while it runs, and a second one stops with an error.
"""
from __future__ import annotations

import fcntl
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
LOCK = ".encode-dir.lock"
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


def is_embedding(path: Path) -> bool:
    """Whether `path` is a whole .npy of one embedding: float32 (1, 256, E, E) by its header, and exactly as long as
    the header says (a 0-byte, garbage or cut-off file is not)."""
    try:
        with open(path, "rb") as f:
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}[np.lib.format.read_magic(f)]
            shape, fortran, dtype = read_header(f)
            data_at = f.tell()
    except (OSError, ValueError, SyntaxError, KeyError):
        return False
    return (dtype == np.float32 and not fortran and len(shape) == 4 and shape[:2] == (1, 256) and shape[2] == shape[3]
            and os.path.getsize(path) == data_at + 4 * int(np.prod(shape)))


def lock_output(out_dir: Path) -> int:
    """An exclusive flock on out_dir/LOCK (released when the process ends); ValueError naming the lock when another
    job holds it."""
    fd = os.open(out_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"another encode-dir job is writing to {out_dir} (it holds {out_dir / LOCK}); expected one "
                         "job per EMBEDDINGS at a time: wait for it, or choose another -o") from None
    return fd


def plan_job(images_dir: Path, out_dir: Path) -> tuple:
    """(lock, manifest, images to do, {status: images skipped}): the images encoded (their .npy is an embedding;
    recorded when a killed job wrote the .npy but not its row) and those recorded unreadable are skipped; lock: the
    descriptor of lock_output's lock, for the caller to close when the job ends."""
    if not images_dir.is_dir():
        raise ValueError(f"IMAGES {images_dir} is not a directory; expected a directory of images")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"-o {out_dir} is a file; expected a directory for the embeddings (created if missing)")
    images = find_images(images_dir)
    if not images:
        raise ValueError(f"{images_dir} holds no image (expected files ending in {', '.join(IMAGE_SUFFIXES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_output(out_dir)                # before anything is read or deleted there
    try:
        outputs = existing_outputs(out_dir)
        manifest = Manifest(out_dir / MANIFEST)
    except BaseException:
        os.close(lock)
        raise
    done = {im for im in images if output_name(im) in outputs and is_embedding(out_dir / output_name(im))}
    manifest.append([row(im, "ok") for im in sorted(done) if manifest.rows.get(im, {}).get("status") != "ok"])
    bad = {im for im in images if manifest.rows.get(im, {}).get("status") == "unreadable"} - done
    return lock, manifest, [im for im in images if im not in done | bad], {"ok": len(done), "unreadable": len(bad)}


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
    file (model_check) before any encoder loads it."""
    from ..model_check import check_model
    metadata = check_model(model)
    return {n: metadata[f"mobilesam.{n}"] for n in ("image_size", "pixel_mean", "pixel_std")}


def run(args) -> int:
    """The job: plan, stream batches (in-process or on Ray), record every row, print the summary; exit status."""
    images_dir, out_dir = Path(args.images).resolve(), Path(args.output).resolve()
    lock, manifest, todo, before = plan_job(images_dir, out_dir)
    try:
        return _run_planned(args, images_dir, out_dir, manifest, todo, before)
    finally:
        os.close(lock)


def _run_planned(args, images_dir: Path, out_dir: Path, manifest: Manifest, todo: list, before: dict) -> int:
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
