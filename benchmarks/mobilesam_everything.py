"""Segment everything (SAM's automatic mask generator): ggpy vs the official mobile_sam generator, side by side.

    python benchmarks/mobilesam_everything.py [-b cpu|cuda] [-t 2] [--points-per-side 32] [--crop-n-layers 0 1]
                                              [--rounds 1] [--pred-iou-thresh 0.88] [--stability-score-thresh 0.95]
                                              [--tf32]

Both hold the same seeded random checkpoint (ggpy.models.mobilesam.random_weights, seed 0: ggpy its GGUF conversion,
PyTorch the official `build_sam_vit_t()` model) and generate the masks of the sample picture with the same
parameters (SamAutomaticMaskGenerator's defaults unless given), once per crop_n_layers value and round. Each runtime
lives in a process of its own (thread pools never compete; every BLAS library held to -t threads); in each round
they take turns in rotating order, after a pause. Time per image is split into encode (image encoder, every crop),
decode (prompt encoder + mask decoder over the point grid) and post-processing (everything else: upscaling,
thresholds, stability scores, boxes, RLE, NMS). ggpy reports its stages itself; for the official generator,
encode is the time inside SamPredictor.set_image and decode the span from the prompt encoder's start to the mask
decoder's end (forward hooks, synchronised on CUDA). The official generator's batched_nms comes from torchvision
when it is installed, else from a torch stand-in (the IoU matrix, then the greedy pass), as ggpy's numpy one; its
box_area gets (N, 4) boxes also when no crop kept a mask (the official code then passes an empty 1-d tensor).
Records are compared (count; each official mask's best IoU with a ggpy mask of the same point). Needs torch and
mobile_sam. The first ggpy run of a process compiles no kernel that the numba cache holds already; the table's
times are medians over the rounds. Precision: F32 on both sides (PyTorch's TF32 switches off), or with --tf32 F32
with TF32 matrix products and convolutions on both (ggpy's Predictor(tf32=True); PyTorch's allow_tf32 on).
"""
from __future__ import annotations

import argparse
import importlib.util
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

PAUSE_S = 0.5
STAGES = ("encode", "decode", "postprocess")


def torch_batched_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms's result without torchvision: kept indices, highest score first (computed on
    the CPU, returned on the boxes' device)."""
    import torch
    device = boxes.device
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    boxes, scores, idxs = boxes.float().cpu(), scores.float().cpu(), idxs.cpu()
    boxes = boxes + idxs[:, None].float() * (boxes.max() + 1)
    order = torch.sort(scores, descending=True, stable=True).indices
    b = boxes[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    wh = (torch.minimum(b[:, None, 2:], b[None, :, 2:]) - torch.maximum(b[:, None, :2], b[None, :, :2])).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    over = inter / (area[:, None] + area[None, :] - inter) > iou_threshold
    dropped = torch.zeros(len(b), dtype=torch.bool)
    keep = []
    for i in range(len(b)):
        if not dropped[i]:
            keep.append(i)
            dropped |= over[i]
    return order[torch.as_tensor(keep, dtype=torch.long)].to(device)


class GgpyRuntime:
    def __init__(self, backend: str, threads: int, tf32: bool):
        from ggpy.models.mobilesam.random_weights import random_model
        from ggpy.models.mobilesam.predictor import Predictor
        self.predictor = Predictor(str(random_model()), backend=backend, n_threads=threads, tf32=tf32)
        self.generators = {}
        self.version = "ggpy"

    def generate(self, image, params: dict) -> tuple:
        """One image through the generator of these parameters, made on first use and kept (as an application
        keeps it for image after image: its decoder graphs are planned once)."""
        from ggpy.models.mobilesam.automatic import AutomaticMaskGenerator
        key = repr(sorted(params.items()))
        if key not in self.generators:
            self.generators[key] = AutomaticMaskGenerator(self.predictor, output_mode="uncompressed_rle", **params)
        gen = self.generators[key]
        gen.timings = dict.fromkeys(gen.timings, 0.0)
        t0 = time.perf_counter()
        records = gen.generate(image)
        total = time.perf_counter() - t0
        t = gen.timings
        return records, total, {"encode": t["encode"], "decode": t["decode"], "postprocess": total - t["encode"]
                                - t["decode"]}


class TorchRuntime:
    def __init__(self, backend: str, threads: int, tf32: bool):
        import torch

        from ggpy.models.mobilesam.random_weights import random_state_dict
        from ggpy.models.mobilesam.timm_stub import install_timm_stub
        real_torchvision = importlib.util.find_spec("torchvision") is not None
        install_timm_stub()
        for noise in ("Overwriting tiny_vit", "Importing from timm"):
            warnings.filterwarnings("ignore", message=noise)
        import mobile_sam
        import mobile_sam.automatic_mask_generator as official
        if not real_torchvision:
            official.batched_nms = torch_batched_nms
        box_area = official.box_area      # the official generator gives it a 1-d tensor when no crop kept a mask
        official.box_area = lambda boxes: box_area(boxes.reshape(-1, 4))
        self.nms = "torchvision" if real_torchvision else "torch stand-in"
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        self.torch, self.official, self.device = torch, official, torch.device(backend)
        sam = mobile_sam.build_sam_vit_t()
        sam.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in random_state_dict(0).items()}, strict=True)
        self.sam = sam.to(self.device).eval()
        self.spans = {"decode": 0.0, "encode": 0.0}
        sam.prompt_encoder.register_forward_pre_hook(lambda *_: self._stamp("start"))
        sam.mask_decoder.register_forward_hook(lambda *_: self._add("decode"))
        self.version = f"torch {torch.__version__}, NMS {self.nms}"

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def _stamp(self, key: str):
        self._sync()
        self.started = time.perf_counter()

    def _add(self, key: str):
        self._sync()
        self.spans[key] += time.perf_counter() - self.started

    def generate(self, image, params: dict) -> tuple:
        gen = self.official.SamAutomaticMaskGenerator(self.sam, output_mode="uncompressed_rle", **params)
        set_image = gen.predictor.set_image

        def timed_set_image(*args, **kw):
            self._stamp("start")
            set_image(*args, **kw)
            self._add("encode")
        gen.predictor.set_image = timed_set_image
        self.spans = {"decode": 0.0, "encode": 0.0}
        t0 = time.perf_counter()
        records = gen.generate(image)
        self._sync()
        total = time.perf_counter() - t0
        return records, total, {"encode": self.spans["encode"], "decode": self.spans["decode"],
                                "postprocess": total - self.spans["encode"] - self.spans["decode"]}


RUNTIMES = {"ggpy": GgpyRuntime, "official": TorchRuntime}


def worker(conn, kind: str, backend: str, threads: int, tf32: bool, image: np.ndarray):
    from threadpoolctl import threadpool_limits
    threadpool_limits(threads, user_api="blas")
    try:
        runtime = RUNTIMES[kind](backend, threads, tf32)
        conn.send(("ok", runtime.version))
        while (msg := conn.recv()) is not None:
            records, total, stages = runtime.generate(image, msg[1])
            conn.send(("ok", (records, total, stages)))
    except Exception as e:  # noqa: BLE001 - any failure goes to the parent, which reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))


def compare(ours: list, ref: list) -> str:
    """'n / n masks, lowest IoU x' of each official mask with its best ggpy counterpart of the same point."""
    from ggpy.models.mobilesam.mask_rle import rle_to_mask
    lowest = 1.0
    for r in ref:
        same = [o for o in ours if o["point_coords"] == r["point_coords"]]
        a = rle_to_mask(r["segmentation"])
        best = 0.0
        for o in same:
            b = rle_to_mask(o["segmentation"])
            union = (a | b).sum()
            best = max(best, 1.0 if union == 0 else (a & b).sum() / union)
        lowest = min(lowest, best)
    return f"{len(ours)} / {len(ref)} masks, lowest IoU {lowest:.4f}" if ref else f"{len(ours)} / 0 masks"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--points-per-side", type=int, default=32)
    p.add_argument("--crop-n-layers", type=int, nargs="+", default=[0, 1])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--pred-iou-thresh", type=float, default=0.88)
    p.add_argument("--stability-score-thresh", type=float, default=0.95)
    p.add_argument("--tf32", action="store_true", help="TF32 matrix products and convolutions on both sides")
    return p.parse_args(argv)


def main(argv=None):
    opts = parse_args(argv)
    from ggpy.models.mobilesam.options import SAMPLE_IMAGE
    from ggpy.models.mobilesam.random_weights import random_model
    from ggpy.models.mobilesam.preprocess import load_image
    image = load_image(SAMPLE_IMAGE)
    random_model()
    print(f"segment everything, {SAMPLE_IMAGE.name} ({image.shape[1]}x{image.shape[0]}), {opts.points_per_side}^2 "
          f"points, backend {opts.backend}{' TF32' if opts.tf32 else ' F32'}, {opts.threads} threads; "
          f"{platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    workers = [Worker(kind, worker, (kind, opts.backend, opts.threads, opts.tf32, image)) for kind in RUNTIMES]
    for w in workers:
        print(f"  {w.label}: {w.started}")
    rows = []
    try:
        for layers in opts.crop_n_layers:
            params = {"points_per_side": opts.points_per_side, "crop_n_layers": layers,
                      "pred_iou_thresh": opts.pred_iou_thresh, "stability_score_thresh": opts.stability_score_thresh}
            results = {w.label: [] for w in workers}
            for r in range(opts.rounds):
                k = r % len(workers)
                for w in workers[k:] + workers[:k]:
                    time.sleep(PAUSE_S)
                    results[w.label].append(w.call("generate", params))
                    print(f"  crop_n_layers {layers}, round {r + 1}: {w.label} {results[w.label][-1][1]:.1f} s")
            rows.append((layers, results))
    finally:
        for w in workers:
            w.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| crop_n_layers | runtime | encode s | decode s | post-processing s | total s | official / ggpy | masks |")
    print("| --- " * 8 + "|")
    for layers, results in rows:
        med = {k: {s: float(np.median([v[2][s] for v in runs])) for s in STAGES} | {"total": float(np.median(
            [v[1] for v in runs]))} for k, runs in results.items()}
        match = compare(results["ggpy"][-1][0], results["official"][-1][0])
        for kind in RUNTIMES:
            m = med[kind]
            ratio = f"{med['official']['total'] / med['ggpy']['total']:.2f}" if kind == "ggpy" else ""
            print(f"| {layers} | {kind} | {m['encode']:.2f} | {m['decode']:.2f} | {m['postprocess']:.2f} | "
                  f"{m['total']:.2f} | {ratio} | {match if kind == 'ggpy' else len(results[kind][-1][0])} |")


if __name__ == "__main__":
    main()
