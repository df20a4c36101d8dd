"""encode-dir --ray on one GPU and on every GPU of the machine (issue 18), side by side in one run.

    python benchmarks/encode_dir_gpus.py [--images 400] [--size 1024 768] [--batch 8] [--share-gpu K] [--rounds R]
                                         [--log-dir DIR] [--work-dir DIR]

Writes --images random JPEGs into a temporary folder, then for each way starts a local Ray cluster with `ray start
--head --block --num-gpus G` (its start-up timed apart; stopped by signalling its process group, so other Ray
instances on the machine are left alone), runs the CLI `ggpy-sam encode-dir IMAGES -o OUT
-b cuda --batch B --ray ADDRESS` against it (one encoder actor per GPU the cluster declares, with the seeded
random-weights model) and stops the cluster:

- 1 GPU: a cluster of one GPU;
- every GPU: a cluster of all of them (with two or more);
- K actors on one GPU (--share-gpu K, for a machine of one GPU: the plumbing of several actors): a cluster declaring
  K GPUs with RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1, so every actor runs on GPU 0.

Before the ways, one in-process encode-dir of a batch fills the kernel cache (GGPY_CUDA_CACHE), so that no way pays
for NVRTC compilation. Per way: the job's wall time (actors loading their model included) and its images/s; the
steady images/s, from the embeddings' write times (the last 90% of them, over the time from the 10% mark to the
last); and checks: every image has exactly one manifest row, status ok, and one .npy; the embeddings equal the
1-GPU run's (largest relative difference). With --rounds R the ways run R times, every other round in reverse order
(a slow first job on a fresh machine shows up as a round apart, not as a way); the summary takes each way's best
round. --log-dir keeps each job's stderr (the progress bar, Ray's warnings) as <way>-<round>.log. --work-dir: where
the images and the embeddings go (a temporary folder in it; default the system's temporary folder), e.g. /dev/shm to
see what the disk's synced writes cost.
The last line: `SUMMARY ... speed-up X.XX` (every GPU, or the shared GPU, over 1 GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
RAY = [sys.executable, "-m", "ray.scripts.scripts"]        # the `ray` command, where its script is not installed


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def write_images(folder: Path, n: int, size: tuple) -> None:
    rng = np.random.default_rng(0)
    w, h = size
    base = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    for i in range(n):     # smooth random pictures (JPEG of noise is slow to write and large)
        img = Image.fromarray(np.roll(base, i, axis=(0, 1))).resize((w, h), Image.BILINEAR)
        sub = folder / f"part{i % 4}"
        sub.mkdir(exist_ok=True)
        img.save(sub / f"img{i:04d}.jpg", quality=90)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(port: int, gpus: int, env: dict) -> subprocess.Popen:
    """`ray start --head --block` declaring `gpus` GPUs, in a process group of its own; returns once the head
    answers on `port`."""
    proc = subprocess.Popen(RAY + ["start", "--head", "--block", f"--port={port}", f"--num-gpus={gpus}",
                                   "--include-dashboard=false", "--disable-usage-stats"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            raise SystemExit(f"error: ray start exited with status {proc.returncode}")
        time.sleep(0.5)
    stop_cluster(proc)
    raise SystemExit("error: the Ray head did not answer within 120 s")


def stop_cluster(proc: subprocess.Popen) -> None:
    """Stop the head and every process it started (this cluster's alone)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def run_way(images: Path, out: Path, gpus: int, share: bool, batch: int, log: Path | None) -> dict:
    """Start a local cluster declaring `gpus` GPUs, run encode-dir on it (its stderr into `log`), stop it."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if share:
        env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
    port = free_port()
    t0 = time.perf_counter()
    proc = start_cluster(port, gpus, env)
    started = time.perf_counter() - t0
    try:
        t0, began = time.perf_counter(), time.time()
        r = subprocess.run([sys.executable, "-m", "ggpy.models.mobilesam", "encode-dir", str(images), "-o", str(out),
                            "-b", "cuda", "--batch", str(batch), "--ray", f"127.0.0.1:{port}"], env=env, cwd=ROOT,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
    finally:
        stop_cluster(proc)
    if log is not None:
        log.write_text(r.stderr)
    if r.returncode != 0:
        raise SystemExit(f"encode-dir failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return {"start_s": started, "wall_s": wall, "began": began, "summary": r.stdout.strip().splitlines()[-1]}


def warm_kernel_cache(images: Path, out: Path, batch: int) -> float:
    """Seconds of one in-process encode-dir of the first `batch` images (compiles and caches every kernel)."""
    first = sorted(images.rglob("*.jpg"))[:batch]
    warm = out / "images"
    warm.mkdir(parents=True)
    for p in first:
        (warm / p.name).symlink_to(p)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "ggpy.models.mobilesam", "encode-dir", str(warm), "-o", str(out / "emb"),
                        "-b", "cuda", "--batch", str(batch)], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"the warm-up encode-dir failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def steady_rate(out: Path, began: float) -> tuple:
    """(images/s over the last 90% of embeddings written (start-up and the first calls left out), the seconds after
    the job began at which the first, 10%, 50% and last embeddings were written)."""
    times = sorted(p.stat().st_mtime for p in out.rglob("*.npy"))
    first = len(times) // 10
    rate = (len(times) - 1 - first) / (times[-1] - times[first]) if times[-1] > times[first] else float("nan")
    return rate, [round(times[i] - began, 1) for i in (0, first, len(times) // 2, -1)]


def check(images: Path, out: Path, reference: Path | None) -> tuple:
    """(images done exactly once and ok, largest relative difference from the reference run's embeddings)."""
    names = sorted(str(p.relative_to(images)) for p in images.rglob("*.jpg"))
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines() if line.strip()]
    per_image = {}
    for row in rows:
        per_image.setdefault(row["image"], []).append(row["status"])
    once = all(per_image.get(n) == ["ok"] for n in names) and len(per_image) == len(names)
    once = once and all((out / (n + ".npy")).is_file() for n in names)
    diff = 0.0
    if reference is not None:
        for n in names:
            a, b = np.load(out / (n + ".npy")), np.load(reference / (n + ".npy"))
            diff = max(diff, float(np.abs(a - b).max() / np.abs(b).max()))
    return once, diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--size", type=int, nargs=2, default=(1024, 768), metavar=("W", "H"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--share-gpu", type=int, default=0, metavar="K",
                    help="also run K actors on GPU 0 (default: 2 on a machine of one GPU)")
    ap.add_argument("--rounds", type=int, default=1, help="run the ways this many times, every other round reversed")
    ap.add_argument("--log-dir", type=Path, help="keep each job's stderr there")
    ap.add_argument("--work-dir", type=Path, help="the images and embeddings in a temporary folder there")
    opts = ap.parse_args(argv)
    n_gpus = gpu_count()
    if n_gpus == 0:
        raise SystemExit("error: no GPU (nvidia-smi -L lists none)")
    share = opts.share_gpu or (2 if n_gpus == 1 else 0)
    ways = [("1 GPU", 1, False)] + ([(f"{n_gpus} GPUs", n_gpus, False)] if n_gpus > 1 else [])
    ways += [(f"{share} actors on 1 GPU", share, True)] if share else []
    with tempfile.TemporaryDirectory(dir=opts.work_dir) as tmp:
        images = Path(tmp) / "images"
        images.mkdir()
        t0 = time.perf_counter()
        write_images(images, opts.images, tuple(opts.size))
        print(f"{opts.images} JPEGs {opts.size[0]}x{opts.size[1]} written in {time.perf_counter() - t0:.1f} s; "
              f"{n_gpus} GPU(s); batch {opts.batch}", flush=True)
        print(f"kernel cache warmed by one in-process batch in {warm_kernel_cache(images, Path(tmp) / 'warm', opts.batch):.1f} s",
              flush=True)
        rows, reference = [], None
        if opts.log_dir is not None:
            opts.log_dir.mkdir(parents=True, exist_ok=True)
        for k in range(1, opts.rounds + 1):
            for name, gpus, shared in (ways if k % 2 else ways[::-1]):
                out = Path(tmp) / f"out-{gpus}-{shared}-{k}"
                log = opts.log_dir / f"{gpus}-{'shared' if shared else 'gpus'}-{k}.log" if opts.log_dir else None
                r = run_way(images, out, gpus, shared, opts.batch, log)
                once, diff = check(images, out, reference)
                reference = reference or out
                ready, marks = steady_rate(out, r["began"])
                print(f"{name}, round {k}: embeddings first / 10% / 50% / last written {marks} s after the job began",
                      flush=True)
                rows.append({"way": name, "round": k, "start": r["start_s"], "wall": r["wall_s"],
                             "rate": opts.images / r["wall_s"], "steady": ready, "once": once, "diff": diff})
                print(f"{name}, round {k}: {rows[-1]['rate']:.1f} images/s, steady {ready:.1f} | {r['summary']}",
                      flush=True)
    rates = {name: max(row["rate"] for row in rows if row["way"] == name) for name, _, _ in ways}
    steady = {name: max(row["steady"] for row in rows if row["way"] == name) for name, _, _ in ways}
    print("\n| way | round | cluster start s | job wall s | images/s | vs 1 GPU (best) | steady images/s | vs 1 GPU (best) "
          "| every image once, ok | max rel. diff vs first 1 GPU |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['way']} | {row['round']} | {row['start']:.1f} | {row['wall']:.1f} | {row['rate']:.1f} | "
              f"{row['rate'] / rates['1 GPU']:.2f} | {row['steady']:.1f} | {row['steady'] / steady['1 GPU']:.2f} | "
              f"{'yes' if row['once'] else 'NO'} | {row['diff']:.1e} |")
    best = ways[-1][0] if len(ways) > 1 else "1 GPU"
    print(f"SUMMARY encode-dir --ray: 1 GPU {rates['1 GPU']:.1f} images/s, {best} {rates[best]:.1f}: speed-up "
          f"{rates[best] / rates['1 GPU']:.2f} (steady {steady['1 GPU']:.1f} vs {steady[best]:.1f}: "
          f"{steady[best] / steady['1 GPU']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
