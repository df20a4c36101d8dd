"""MobileSAM per-prompt decoding: ggpy's Predictor vs the official PyTorch SamPredictor, side by side in one run.

    python benchmarks/mobilesam_decoder.py [-t 1 2] [-b cpu cuda] [--runs 20] [--rounds 3]

The measurement for RESULTS.md, on a quiet machine (the defaults spelled out; a sanity check: --runs 3 --rounds 1):

    python benchmarks/mobilesam_decoder.py -t 1 2 -b cpu cuda --runs 20 --rounds 3

Both hold the same seeded random checkpoint (ggpy.models.mobilesam.random_weights, seed 0: ggpy its GGUF
conversion, PyTorch the official `build_sam_vit_t()` model) and set the same image (the sample picture): each
computes the image embedding once (the two agree to ~1e-6) and every prompt reuses it, as in SAM's predictor. Prompts:
1 point, 3 points (two foreground, one background), a box, a box and a point; multimask output on. A "prompt"
is one `predict()` call, numpy in, numpy out: prompt transform, prompt encoder + mask decoder ("decode"),
upscaling to the image size and thresholding. "decode" is ggpy's `last_timings['decode']` and, for PyTorch,
the span from the prompt encoder's start to the mask decoder's end (forward hooks, synchronised on CUDA);
"rest" is the remainder of the call (prompt transform and post-processing).

Phases: CPU at each thread count of -t, then CUDA (ggpy's CUDA backend vs PyTorch on the GPU, both F32: TF32
off in matmuls and cuDNN) where a GPU is present (skipped, and said so, without one). In each phase ggpy and PyTorch live in processes of their own
(thread pools never compete; every BLAS library held to the thread count); per round and per prompt each
runtime, in rotating order, gets a pause, two warm-up calls and N timed calls. The table gives medians over
all rounds and PyTorch's time / ggpy's (> 1: ggpy is faster); outputs are compared per prompt (IoU predictions
and low-res logits: ||a-b||/||b||; masks: share of pixels that differ). Needs torch and mobile_sam.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from process_worker import Worker  # noqa: E402 - after the path is set

PAUSE_S = 0.2            # idle workers of the previous runtime stop spinning
WARMUP = 2               # untimed calls per prompt before each timed series
PROMPTS = ("1 point", "3 points", "box", "box + point")


def prompt(name: str, height: int, width: int) -> dict:
    """predict() keyword arguments of the prompt `name`, placed at fixed fractions of a height x width image."""
    def xy(*pairs):
        return np.array([[fx * width, fy * height] for fx, fy in pairs], dtype=np.float32)

    box = np.array([0.2 * width, 0.25 * height, 0.75 * width, 0.8 * height], dtype=np.float32)
    centre = xy((0.5, 0.5))
    return {
        "1 point": {"point_coords": centre, "point_labels": np.array([1])},
        "3 points": {"point_coords": xy((0.5, 0.5), (0.35, 0.6), (0.85, 0.15)), "point_labels": np.array([1, 1, 0])},
        "box": {"box": box},
        "box + point": {"point_coords": centre, "point_labels": np.array([1]), "box": box},
    }[name]


# -- the runtimes, each built inside its own worker process ------------------------------------------
class GgpyRuntime:
    """ggpy.models.mobilesam.predictor.Predictor on the random-weights GGUF."""

    def __init__(self, backend: str, threads: int, image: np.ndarray):
        from ggpy.models.mobilesam.random_weights import random_model
        from ggpy.models.mobilesam.predictor import Predictor
        self.predictor = Predictor(str(random_model()), backend=backend, n_threads=threads)
        self.predictor.set_image(image)
        self.version = "ggpy"

    def predict(self, kwargs: dict) -> tuple:
        """((masks, iou_predictions, low_res_logits), decode seconds) of one multimask prediction."""
        out = self.predictor.predict(**kwargs, multimask_output=True)
        return out, self.predictor.last_timings["decode"]


class TorchRuntime:
    """The official mobile_sam SamPredictor; forward hooks time the prompt encoder + mask decoder span."""

    def __init__(self, backend: str, threads: int, image: np.ndarray):
        import torch

        from ggpy.models.mobilesam.random_weights import random_state_dict
        from ggpy.models.mobilesam.timm_stub import install_timm_stub
        install_timm_stub()
        for noise in ("Overwriting tiny_vit", "Importing from timm"):   # mobile_sam on a real timm: re-registration,
            warnings.filterwarnings("ignore", message=noise)             # a deprecated import path
        import mobile_sam

        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False    # F32, as ggpy runs
        self.torch, self.device = torch, torch.device(backend)
        sam = mobile_sam.build_sam_vit_t()
        sam.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in random_state_dict(0).items()}, strict=True)
        sam.to(self.device).eval()   # eval() after loading: TinyViT's attention caches its bias table then
        sam.prompt_encoder.register_forward_pre_hook(lambda *_: self._stamp("start"))
        sam.mask_decoder.register_forward_hook(lambda *_: self._stamp("end"))
        self.predictor = mobile_sam.SamPredictor(sam)
        self.predictor.set_image(image)
        self.version = f"torch {torch.__version__}"
        self.stamps = {}

    def _stamp(self, key: str):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()
        self.stamps[key] = time.perf_counter()

    def predict(self, kwargs: dict) -> tuple:
        """((masks, iou_predictions, low_res_logits), decode seconds) of one multimask prediction."""
        out = self.predictor.predict(**kwargs, multimask_output=True)
        return out, self.stamps["end"] - self.stamps["start"]


RUNTIMES = {"ggpy": GgpyRuntime, "PyTorch": TorchRuntime}


def _time_prompt(runtime, kwargs: dict, runs: int) -> list:
    """[(total seconds, decode seconds)] of `runs` predict() calls after WARMUP calls."""
    for _ in range(WARMUP):
        runtime.predict(kwargs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        _, decode = runtime.predict(kwargs)
        times.append((time.perf_counter() - t0, decode))
    return times


def worker(conn, kind: str, backend: str, threads: int, image: np.ndarray):
    """Build runtime `kind`, then answer ("time", prompt, runs) / ("output", prompt) until sent None. Every BLAS
    library is held to `threads` threads (numpy's as well: PyTorch's and ggpy's hosts use it for small steps)."""
    from threadpoolctl import threadpool_limits
    threadpool_limits(threads, user_api="blas")
    try:
        runtime = RUNTIMES[kind](backend, threads, image)
        conn.send(("ok", runtime.version))
        while (msg := conn.recv()) is not None:
            kwargs = prompt(msg[1], *image.shape[:2])
            if msg[0] == "time":
                conn.send(("ok", _time_prompt(runtime, kwargs, msg[2])))
            else:
                conn.send(("ok", runtime.predict(kwargs)[0]))
    except Exception as e:  # noqa: BLE001 - any failure goes to the parent, which reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))


# -- the parent: phases, interleaved rounds, report -----------------------------------------------------
def interleave(workers: list, rounds: int, runs: int) -> dict:
    """{(kind, prompt): [(total, decode)]}: per round and prompt, each worker in rotating order pauses, warms up
    and times `runs` calls."""
    times = {(w.label, p): [] for w in workers for p in PROMPTS}
    for r in range(rounds):
        for i, name in enumerate(PROMPTS):
            k = (r + i) % len(workers)
            for w in workers[k:] + workers[:k]:
                time.sleep(PAUSE_S)
                times[(w.label, name)] += w.call("time", name, runs)
        print(f"  round {r + 1}/{rounds} done")
    return times


def rel_err(a, b) -> float:
    """||a - b|| / ||b|| in float64."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(workers: dict) -> dict:
    """{prompt: (IoU rel. error, logits rel. error, share of mask pixels that differ)} of ggpy vs PyTorch."""
    out = {}
    for name in PROMPTS:
        (m, iou, low), (m_ref, iou_ref, low_ref) = (workers[k].call("output", name) for k in ("ggpy", "PyTorch"))
        if m.shape != m_ref.shape:
            raise RuntimeError(f"{name}: ggpy's masks have shape {m.shape}, PyTorch's {m_ref.shape}")
        out[name] = (rel_err(iou, iou_ref), rel_err(low, low_ref), float(np.mean(m != m_ref)))
    return out


def run_phase(label: str, backend: str, threads: int, image: np.ndarray, opts) -> list:
    """Time every prompt on ggpy and PyTorch for one backend/thread count; rows of the final table."""
    print(f"{label}: starting ggpy and PyTorch")
    workers = {}
    try:
        for kind in RUNTIMES:
            t0 = time.perf_counter()
            workers[kind] = Worker(kind, worker, (kind, backend, threads, image))
            print(f"  {kind} ({workers[kind].started}) ready in {time.perf_counter() - t0:.1f} s (image encoded)")
        errors = compare(workers)
        times = interleave(list(workers.values()), opts.rounds, opts.runs)
    finally:
        for w in workers.values():
            w.close()
    return [(label, name, times[("ggpy", name)], times[("PyTorch", name)], errors[name]) for name in PROMPTS]


def _medians(samples: list) -> tuple:
    """(median total ms, median decode ms, median rest ms) of [(total, decode)] seconds."""
    a = np.array(samples) * 1e3
    return float(np.median(a[:, 0])), float(np.median(a[:, 1])), float(np.median(a[:, 0] - a[:, 1]))


def print_table(rows: list):
    """Markdown table: per phase and prompt, ggpy's and PyTorch's decode / rest / total ms and the ratio."""
    print("\n| device | prompt | ggpy decode ms | ggpy rest ms | ggpy total ms | PyTorch decode ms | PyTorch rest ms "
          "| PyTorch total ms | PyTorch / ggpy | IoU err | logits err | mask pixels differing |")
    print("| --- " * 12 + "|")
    for label, name, ours, theirs, (e_iou, e_low, e_mask) in rows:
        (t, d, r), (t2, d2, r2) = _medians(ours), _medians(theirs)
        print(f"| {label} | {name} | {d:.2f} | {r:.2f} | {t:.2f} | {d2:.2f} | {r2:.2f} | {t2:.2f} | {t2 / t:.2f} | "
              f"{e_iou:.1e} | {e_low:.1e} | {e_mask:.1e} |")


def summary(rows: list) -> str:
    """One line: in how many cases ggpy is faster per prompt, and the ratios' range and geometric mean."""
    ratios = np.array([_medians(theirs)[0] / _medians(ours)[0] for _, _, ours, theirs, _ in rows])
    return (f"summary: ggpy faster than PyTorch per prompt in {int((ratios > 1).sum())} of {len(ratios)} cases; "
            f"PyTorch / ggpy time per prompt {ratios.min():.2f}..{ratios.max():.2f}, geometric mean "
            f"{np.exp(np.log(ratios).mean()):.2f}")


def gpu_present() -> bool:
    """Whether PyTorch sees a CUDA device (checked in a child process, so this one never initialises CUDA)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_torch_sees_cuda)


def _torch_sees_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-t", "--threads", type=int, nargs="+", default=[1, 2], help="CPU thread counts (default: 1 2)")
    p.add_argument("-b", "--backends", nargs="+", choices=("cpu", "cuda"), default=["cpu", "cuda"],
                   help="cuda is skipped without a GPU (default: cpu cuda)")
    p.add_argument("--runs", type=int, default=20, help="timed calls per prompt, runtime and round")
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args(argv)


def main(argv=None):
    opts = parse_args(argv)
    from ggpy.models.mobilesam.options import SAMPLE_IMAGE
    from ggpy.models.mobilesam.random_weights import random_model
    from ggpy.models.mobilesam.preprocess import load_image
    image = load_image(SAMPLE_IMAGE)
    random_model()                   # converted once here, not by two workers at the same time
    print(f"MobileSAM decoder per prompt, multimask; image {SAMPLE_IMAGE.name} ({image.shape[1]}x{image.shape[0]}); "
          f"{opts.rounds} rounds x {opts.runs} runs; {platform.processor() or platform.machine()}, {os.cpu_count()} "
          f"CPUs, load average {os.getloadavg()[0]:.2f}")
    rows = []
    if "cpu" in opts.backends:
        for threads in opts.threads:
            rows += run_phase(f"cpu, {threads} thread{'s' * (threads != 1)}", "cpu", threads, image, opts)
    if "cuda" in opts.backends:
        if gpu_present():
            try:
                rows += run_phase("cuda", "cuda", max(opts.threads), image, opts)
            except RuntimeError as e:        # e.g. ggpy's CUDA backend without cuda-python: the CPU rows still count
                print(f"cuda: failed: {e}")
        else:
            print("cuda: skipped (PyTorch sees no GPU)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print_table(rows)
    print("(decode: prompt encoder + mask decoder; rest: prompt transform, upscaling, thresholding, copies; "
          "errors: ggpy vs PyTorch)")
    print(summary(rows))


if __name__ == "__main__":
    main()
