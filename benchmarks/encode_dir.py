"""encode-dir throughput: in-process vs Ray (CPU: 1 actor of every core, one single-thread actor per core; CUDA:
one actor per GPU), per batch size, side by side in one run.

    python benchmarks/encode_dir.py [--images 24] [--size 640 480] [--batch 1 [8 ...]] [-b cpu|cuda]

Writes --images random JPEGs of --size pixels into a temporary folder, then encodes the folder each way into a
fresh output folder, with the seeded random-weights model (the CLI's default) and the job's own code
(`stream_in_process`, `stream_on_ray`); a local Ray cluster is started after the in-process runs (its start-up
timed and reported apart):

- in-process: one encoder (CPU: of every core's threads, `encode-dir ... -t CORES`);
- Ray, 1 actor (CPU): one encoder actor of CORES threads (`--ray -t CORES`);
- Ray, N actors (CPU): one single-thread actor per core (`--ray -t 1`); CUDA: one actor per GPU (`-b cuda --ray`).

Per way: the job's wall time from the first image submitted (the encoder's loading and planning included, Ray's
cluster start-up not), images/s over the whole job and after the first batch has arrived (the steady rate, once
every actor has loaded its model), and the steady rate relative to in-process at the same batch size.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ggpy.models.mobilesam.random_weights import random_model  # noqa: E402 - after the path is set
from ggpy.models.mobilesam.jobs.encode_dir import input_params, stream_in_process  # noqa: E402
from ggpy.models.mobilesam.jobs.encode_dir_ray import stream_on_ray  # noqa: E402


def make_images(folder: Path, n: int, size: tuple) -> list:
    """n random JPEGs (smooth noise, so they compress like photos) of `size` (W, H); the job's items."""
    from PIL import Image
    rng = np.random.default_rng(0)
    w, h = size
    items = []
    for i in range(n):
        small = rng.integers(0, 256, (h // 16, w // 16, 3), dtype=np.uint8)
        Image.fromarray(small).resize((w, h), Image.BILINEAR).save(folder / f"im{i:04d}.jpg", quality=90)
        items.append({"image": f"im{i:04d}.jpg", "path": str(folder / f"im{i:04d}.jpg")})
    return items


def timed(make_stream) -> tuple:
    """(wall seconds, images, arrival time of the first batch, images in it, ok count) of the stream of batches
    that make_stream() starts (its encoders' loading included)."""
    t0 = time.perf_counter()
    first_t = first_n = n = ok = 0
    for cols in make_stream():
        n += len(cols["image"])
        ok += sum(s == "ok" for s in cols["status"])
        if not first_t:
            first_t, first_n = time.perf_counter() - t0, n
    return time.perf_counter() - t0, n, first_t, first_n, ok


def start_ray(cores: int) -> float:
    """Start a local cluster of `cores` CPUs (the encoders then join it); its start-up seconds."""
    import ray
    os.environ.setdefault("RAY_worker_niceness", "0")      # as encode-dir's local cluster: actors not niced by 15
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    return time.perf_counter() - t0


def ways(backend: str, cores: int) -> list:
    """(name, actors x threads, threads, Ray address or None for in-process) of each way to run."""
    if backend == "cuda":
        return [("in-process", "1 x GPU", None, None), ("Ray, 1 actor per GPU", "GPUs x 1", None, "")]
    return [("in-process", f"1 x {cores}", cores, None), ("Ray, 1 actor", f"1 x {cores}", cores, ""),
            (f"Ray, {cores} actors", f"{cores} x 1", 1, "")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    model = str(random_model())
    prep = input_params(model)
    rows, ray_start = [], None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "images").mkdir()
        items = make_images(tmp / "images", args.images, tuple(args.size))
        runs = sorted(((w, b) for w in ways(args.backend, cores) for b in args.batch), key=lambda r: r[0][3] is not None)
        for i, ((name, shape, threads, address), batch) in enumerate(runs):
            settings = {"model": model, "out_dir": str(tmp / f"out{i}"), "backend": args.backend, "threads": threads,
                        "dtype": "f32", "batch": batch}
            if address is not None and ray_start is None:   # after the in-process runs: Ray's idle workers start with it
                ray_start = start_ray(cores)
            wall, n, first_t, first_n, ok = timed(partial(stream_in_process, items, settings, prep) if address is None
                                                  else partial(stream_on_ray, items, settings, prep, address))
            assert ok == n == len(items), f"{name}: {ok} of {len(items)} images encoded"
            steady = (n - first_n) / (wall - first_t) if n > first_n else float("nan")
            rows.append((name, shape, batch, wall, n / wall, steady))
        import ray
        ray.shutdown()
    print(f"{args.images} JPEGs {args.size[0]}x{args.size[1]}, {args.backend}, {cores} cores; Ray's local cluster "
          f"started in {ray_start:.1f} s (not counted below)\n")
    print("| way | actors x threads | batch | wall s | images/s (job) | images/s (after the first batch) | "
          "steady vs in-process |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = {batch: steady for name, _, batch, _, _, steady in rows if name == "in-process"}
    for name, shape, batch, wall, rate, steady in rows:
        print(f"| {name} | {shape} | {batch} | {wall:.1f} | {rate:.2f} | {steady:.2f} | {steady / base[batch]:.2f} |")


if __name__ == "__main__":
    main()
