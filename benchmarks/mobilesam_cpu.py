"""MobileSAM image encoder on the CPU: ggpy vs PyTorch eager vs ONNX Runtime, side by side in one run.

    python benchmarks/mobilesam_cpu.py [-t THREADS] [--runs N] [--rounds R] [--model path.gguf] [--no-torch] [--no-ort]
                                       [--blas] [--baseline PATH]

Batch 1, 1024x1024, the same seeded random weights and input for every runtime (with --model, ggpy uses that
file and the others keep the random weights, so their outputs are not compared). --blas adds ggpy with every
mul_mat forced onto BLAS sgemm instead of ggpy's own GEMM; --baseline PATH adds ggpy from another checkout (e.g. a
`git worktree` of an earlier commit), for before/after in one run. Each runtime lives in a
process of its own, so thread pools never compete and PyTorch runs twice: with glibc's default malloc and
with MALLOC_MMAP_MAX_=0 (its 64 MiB activations are otherwise mapped and unmapped on every run). In each
round every runtime, in rotating order, gets a pause (idle workers of the previous one stop spinning), one
warm-up and N timed evaluations; the table gives median and min over all rounds, and time / ggpy's time.
Also printed: achieved GFLOP/s, ggpy's time per stage and per kernel (the profiled evaluation of median total out of 3),
ggpy's planned compute memory next to the sum of all intermediates, each process's peak RSS, and the
relative error ||a-b||/||b|| of every output against PyTorch's.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from process_worker import Worker  # noqa: E402 - after the path is set

PAUSE_S = 0.2          # OpenMP / ORT / ggpy workers spin for ~0.1 s after a call
IMAGE_SIZE = 1024
PROFILE_RUNS = 3
REFERENCE = "PyTorch eager"     # the runtime every output is compared with


# -- the runtimes, each built inside its own worker process ------------------------------------------
class GgpyRuntime:
    """ggpy's CPU backend on the GGUF; reports its plan's memory and a profile."""

    force: ClassVar[dict | None] = None      # CPUBackend(force=...)

    def __init__(self, opts, x):
        import ggpy
        try:
            from ggpy.models.mobilesam.runner import ImageEncoder, flops_per_image
        except ImportError:         # a --baseline checkout from before the models moved into ggpy
            from examples.mobilesam.runner import ImageEncoder, flops_per_image
        self.enc = ImageEncoder(opts.model, backend=ggpy.CPUBackend(n_threads=opts.threads, force=self.force))
        self.enc.set_input(x)
        self.flops = flops_per_image(self.enc.hp)

    def __call__(self):
        self.enc.evaluate()

    def output(self) -> np.ndarray:
        self()
        return self.enc.embedding_array()

    def info(self) -> dict:
        """Versions, plan, weights, FLOP count and the profile ({stage: s}, {kernel: s}) of median total."""
        import numba

        profiles = sorted((self.enc.profile() for _ in range(PROFILE_RUNS)), key=lambda p: sum(p[0].values()))
        by_stage, by_kernel = profiles[len(profiles) // 2]
        return {"version": f"numpy {np.__version__}, numba {numba.__version__}", "flops": self.flops,
                "nodes": len(self.enc.graph.nodes), "planned_bytes": self.enc.planned_bytes,
                "intermediate_bytes": self.enc.intermediate_bytes, "weight_bytes": self.enc.model.nbytes,
                "by_stage": by_stage, "by_kernel": by_kernel}


class GgpyBlasRuntime(GgpyRuntime):
    """ggpy with mul_mat on BLAS sgemm (its `blas` implementation) instead of the own GEMM."""

    force: ClassVar[dict | None] = {"mul_mat": "blas"}


class TorchRuntime:
    """The official `Sam.image_encoder` in eager mode under torch.inference_mode."""

    def __init__(self, opts, x):
        import torch
        from _mobilesam_torch import torch_encoder

        from ggpy.models.mobilesam.random_weights import random_state_dict
        torch.set_num_threads(opts.threads)
        self.torch = torch
        self.encoder = torch_encoder(random_state_dict(0))
        self.x = torch.from_numpy(x)

    def __call__(self):
        with self.torch.inference_mode():
            self.y = self.encoder(self.x)

    def output(self) -> np.ndarray:
        self()
        return self.y.numpy().copy()

    def info(self) -> dict:
        return {"version": f"torch {self.torch.__version__}"}


class OrtRuntime:
    """ONNX Runtime's CPU provider on the encoder exported from PyTorch (cached under ~/.cache/ggpy)."""

    def __init__(self, opts, x):
        import onnxruntime
        from _mobilesam_torch import onnx_path, ort_session, torch_encoder

        from ggpy.models.mobilesam.random_weights import random_state_dict
        self.session = ort_session(onnx_path(torch_encoder(random_state_dict(0)), IMAGE_SIZE), opts.threads)
        self.feed = {self.session.get_inputs()[0].name: x}
        self.version = onnxruntime.__version__

    def __call__(self):
        self.y = self.session.run(None, self.feed)[0]

    def output(self) -> np.ndarray:
        self()
        return self.y

    def info(self) -> dict:
        return {"version": f"onnxruntime {self.version}"}


# each runtime: built from (opts, x); __call__ evaluates x once, output() returns the embedding, info() a dict
RUNTIMES = {"ggpy": GgpyRuntime, "ggpy-blas": GgpyBlasRuntime, "torch": TorchRuntime, "ort": OrtRuntime}


def _time_runs(runtime, runs: int) -> list:
    """Seconds of `runs` evaluations after one warm-up."""
    runtime()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        runtime()
        times.append(time.perf_counter() - t0)
    return times


def worker(conn, kind: str, opts, x):
    """Build runtime `kind`, then answer ("time", runs) / ("output",) / ("info",) until sent None."""
    try:
        if kind == "ggpy-baseline":         # the other checkout's ggpy and examples, imported first
            sys.path.insert(0, str(Path(opts.baseline).resolve()))
            kind = "ggpy"
        runtime = RUNTIMES[kind](opts, x)
        conn.send(("ok", None))
        while (msg := conn.recv()) is not None:
            if msg[0] == "time":
                conn.send(("ok", _time_runs(runtime, msg[1])))
            elif msg[0] == "output":
                conn.send(("ok", runtime.output()))
            else:
                info = runtime.info()
                info["max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                conn.send(("ok", info))
    except Exception as e:  # noqa: BLE001 - any failure goes to the parent, which decides whether it is fatal
        conn.send(("error", f"{type(e).__name__}: {e}"))


# -- the parent: start workers, interleave rounds, report ---------------------------------------------
def start_workers(opts, x) -> list:
    """ggpy (required), then PyTorch default and tuned malloc, then ONNX Runtime; optional ones that fail are skipped."""
    plain = {"MALLOC_MMAP_MAX_": None, "MALLOC_TRIM_THRESHOLD_": None}
    specs = [("ggpy", "ggpy", plain)]
    if opts.blas:
        specs.append(("ggpy, mul_mat on BLAS", "ggpy-blas", plain))
    if opts.baseline:
        specs.append((f"ggpy at {opts.baseline}", "ggpy-baseline", plain))
    if opts.torch:
        specs += [(REFERENCE, "torch", plain), ("PyTorch eager, MALLOC_MMAP_MAX_=0", "torch",
                                                     {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": None})]
    if opts.ort:
        specs.append(("ONNX Runtime", "ort", plain))
    workers = []
    for label, kind, env in specs:
        t0 = time.perf_counter()
        try:
            workers.append(Worker(label, worker, (kind, opts, x), env))
        except RuntimeError as e:
            if kind == "ggpy":
                raise
            print(f"skipping {label}: {e}")
            continue
        print(f"started {label} in {time.perf_counter() - t0:.1f} s")
    return workers


def interleave(workers: list, rounds: int, runs: int) -> dict:
    """{label: [seconds]}: per round each worker, in rotating order, pauses, warms up and times `runs` calls."""
    times = {w.label: [] for w in workers}
    for r in range(rounds):
        order = workers[r % len(workers):] + workers[:r % len(workers)]
        for w in order:
            time.sleep(PAUSE_S)
            times[w.label] += w.call("time", runs)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{w.label} {np.median(times[w.label][-runs:]) * 1e3:.0f}"
                                                      for w in workers) + " ms (median)")
    return times


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| in float64."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def print_table(times: dict, infos: dict, errors: dict, flops: float):
    """Markdown table of median/min ms, time / ggpy, GFLOP/s at the median, peak RSS and error vs PyTorch."""
    base = np.median(times["ggpy"])
    print("\n| runtime | median ms | min ms | time / ggpy | GFLOP/s | peak RSS MiB | rel. error vs PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, t in times.items():
        med = np.median(t)
        err = errors.get(label)
        err_text = "reference" if label == REFERENCE else "" if err is None else f"{err:.2e}"
        print(f"| {label} | {med * 1e3:.1f} | {np.min(t) * 1e3:.1f} | {med / base:.2f} | {flops / med / 1e9:.1f} | "
              f"{_mib(infos[label]['max_rss'])} | {err_text} |")


def print_split(title: str, seconds: dict, sort: bool):
    """Markdown table of ms and share for each key of {name: seconds}."""
    total = sum(seconds.values())
    items = sorted(seconds.items(), key=lambda kv: -kv[1]) if sort else seconds.items()
    print(f"\n| {title} | ms | share |\n| --- | --- | --- |")
    for name, s in items:
        print(f"| {name} | {s * 1e3:.1f} | {s / total:.1%} |")
    print(f"| total (profiled) | {total * 1e3:.1f} | |")


def print_ggpy(info: dict):
    """ggpy's graph size, memory and profile."""
    print(f"\nggpy: {info['nodes']} nodes; planned compute memory {_mib(info['planned_bytes'])} MiB, all intermediates "
          f"without reuse {_mib(info['intermediate_bytes'])} MiB "
          f"({info['intermediate_bytes'] / info['planned_bytes']:.1f}x); weights {_mib(info['weight_bytes'])} MiB")
    print_split("ggpy stage", info["by_stage"], sort=False)
    print_split("ggpy kernel", info["by_kernel"], sort=True)


def compare_outputs(workers: list, same_weights: bool) -> dict:
    """{label: relative error vs PyTorch's default-malloc output}, empty without PyTorch or shared weights."""
    labels = [w.label for w in workers]
    if not same_weights or REFERENCE not in labels:
        print("outputs not compared (" + ("--model given: PyTorch/ORT hold other weights)" if not same_weights
                                          else "no PyTorch)"))
        return {}
    outputs = {w.label: w.call("output") for w in workers}
    ref = outputs[REFERENCE]
    return {label: rel_err(y, ref) for label, y in outputs.items() if label != REFERENCE}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=10, help="timed evaluations per runtime per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", help="GGUF for ggpy (default: the seeded random-weights model of ggpy.models.mobilesam)")
    p.add_argument("--baseline", help="another ggpy checkout to time beside this one (before/after in one run)")
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--no-ort", dest="ort", action="store_false")
    p.add_argument("--blas", action="store_true", help="also run ggpy with mul_mat on BLAS sgemm")
    opts = p.parse_args(argv)
    opts.torch = opts.torch and all(importlib.util.find_spec(m) for m in ("torch", "mobile_sam"))
    opts.ort = opts.ort and all(importlib.util.find_spec(m) for m in ("onnxruntime", "torch", "mobile_sam"))
    return opts


def main(argv=None):
    opts = parse_args(argv)
    same_weights = opts.model is None
    if same_weights:
        from ggpy.models.mobilesam.random_weights import random_model
        opts.model = str(random_model())
    x = np.random.default_rng(1).standard_normal((1, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    print(f"MobileSAM image encoder {IMAGE_SIZE}x{IMAGE_SIZE}, batch 1, {opts.threads} threads, {opts.rounds} rounds x "
          f"{opts.runs} runs; model {opts.model}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    workers = start_workers(opts, x)
    try:
        errors = compare_outputs(workers, same_weights)
        times = interleave(workers, opts.rounds, opts.runs)
        infos = {w.label: w.call("info") for w in workers}
    finally:
        for w in workers:
            w.close()
    print("versions: " + ", ".join(sorted({i["version"] for i in infos.values() if "version" in i})))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print_table(times, infos, errors, infos["ggpy"]["flops"])
    print(f"({infos['ggpy']['flops'] / 1e9:.1f} GFLOP per image; time / ggpy > 1: ggpy is faster)")
    print_ggpy(infos["ggpy"])


if __name__ == "__main__":
    main()
