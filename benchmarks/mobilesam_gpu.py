"""MobileSAM image encoder on the GPU: ggpy's CUDA backend vs PyTorch, side by side in one run.

    python benchmarks/mobilesam_gpu.py [--runs N] [--no-compile] [--compile-timeout S]

Batch 1, 1024x1024, one seeded random checkpoint (BatchNorms, LayerNorms and attention biases randomised) in
the official architecture: PyTorch runs the official `mobile_sam` model, ggpy its GGUF conversions (F32 and
F16 weights). Rows: ggpy F32, TF32 (F32 GEMMs rounding inputs to TF32), F16 weights, each replaying one
captured CUDA graph (plus F32 with plain launches from Python); PyTorch eager F32 (TF32 off), TF32 (matmul
and cuDNN), F16 (autocast, and the model in half precision), F32 and F16 at batch 8 (time per image), and
torch.compile (default mode, F32 and TF32)
in a subprocess given --compile-timeout seconds to compile and run (skipped, and said so, past it).
Each time is the median (and min) of N timed calls after warm-ups, every call ending with a synchronize;
errors are ||a-b||/||b|| against PyTorch's F32 embedding. Also printed: ggpy's GPU time per kernel (one
profiled evaluation replayed as a CUDA graph with an event between steps), its planned device memory and
weights, and PyTorch's peak allocated memory. Needs torch with CUDA, mobile_sam, gguf, cuda-python and
nvmath-python.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch

from examples.mobilesam.timm_stub import install_timm_stub

install_timm_stub()


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def timed(fn, runs: int, warmup: int = 3) -> np.ndarray:
    """Seconds of `runs` calls of fn (each followed by a device synchronize) after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return np.array(times)


def set_tf32(on: bool):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_model(checkpoint):
    from examples.mobilesam.random_checkpoint import load_reference_model
    return load_reference_model(checkpoint).image_encoder.cuda().eval()


def compile_main(args):
    """Subprocess: torch.compile the encoder (F32 and TF32) and print one JSON line per mode."""
    enc = torch_model(args.checkpoint)
    x = torch.from_numpy(np.load(args.input)).cuda()
    ref = np.load(args.reference)
    for label, tf32 in (("F32", False), ("TF32", True)):
        set_tf32(tf32)
        torch._dynamo.reset()
        fn = torch.compile(enc)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = fn(x)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            times = timed(lambda: fn(x), args.runs)  # noqa: B023 - called at once
            err = rel_err(fn(x).float().cpu().numpy(), ref)
        print("RESULT " + json.dumps({"label": label, "times": times.tolist(), "err": err, "compile_s": compile_s,
                                      "shape": list(out.shape)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-timeout", type=float, default=120.0)
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--reference", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.compile_child:
        return compile_main(args)

    import ggpy
    from examples.mobilesam.convert import convert
    from examples.mobilesam.random_checkpoint import make_random_checkpoint
    from examples.mobilesam.runner import ImageEncoder, flops_per_image
    from ggpy.backends.cuda.backend import CUDABackend

    tmp = Path(tempfile.mkdtemp(prefix="mobilesam-gpu-"))
    t0 = time.perf_counter()
    ckpt = tmp / "mobile_sam_random.pt"
    make_random_checkpoint(ckpt, seed=0)
    ggufs = {}
    for wt in ("f32", "f16"):
        ggufs[wt] = tmp / f"mobilesam_{wt}.gguf"
        convert(ckpt, ggufs[wt], type=wt, progress=False)
    print(f"random checkpoint and GGUFs in {time.perf_counter() - t0:.1f} s; {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, ggpy {getattr(ggpy, '__version__', '?')}", flush=True)

    x_np = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    x = torch.from_numpy(x_np).cuda()
    rows = []          # (runtime, precision, times, err, note)

    # -- PyTorch eager ------------------------------------------------------------------------------
    enc = torch_model(ckpt)
    torch.cuda.reset_peak_memory_stats()
    set_tf32(False)
    with torch.inference_mode():
        ref = enc(x).float().cpu().numpy()
        eager_peak = torch.cuda.max_memory_allocated()
        for label, tf32, ctx in (("F32", False, None), ("TF32", True, None), ("F16 autocast", False, "autocast")):
            set_tf32(tf32)
            if ctx == "autocast":
                def fn(enc=enc):
                    with torch.autocast("cuda", dtype=torch.float16):
                        return enc(x)
            else:
                def fn(enc=enc):
                    return enc(x)
            out = fn().float().cpu().numpy()
            rows.append(("PyTorch eager", label, timed(fn, args.runs), rel_err(out, ref), ""))
        set_tf32(False)
        half = torch_model(ckpt).half()
        xh = x.half()
        out = half(xh).float().cpu().numpy()
        rows.append(("PyTorch eager", "F16 model.half()", timed(lambda: half(xh), args.runs), rel_err(out, ref), ""))
        # batch 8 (the figure): time per image of one call on 8 copies of the input
        x8, xh8 = x.expand(8, -1, -1, -1).contiguous(), xh.expand(8, -1, -1, -1).contiguous()
        for label, model, inp in (("F32 batch 8, per image", enc, x8), ("F16 model.half() batch 8, per image",
                                                                         half, xh8)):
            out = model(inp)[:1].float().cpu().numpy()
            rows.append(("PyTorch eager", label, timed(lambda m=model, i=inp: m(i), args.runs) / 8,
                         rel_err(out, ref), "8 images per call"))
    enc = half = x8 = xh8 = None
    torch.cuda.empty_cache()
    np.save(tmp / "x.npy", x_np)
    np.save(tmp / "ref.npy", ref)
    print("PyTorch eager done", flush=True)

    # -- ggpy CUDA ----------------------------------------------------------------------------------
    profiles, memory = {}, {}
    for label, wt, tf32, graphs in (("F32", "f32", False, True), ("TF32", "f32", True, True),
                                    ("F16 weights", "f16", False, True), ("F32, no CUDA graph", "f32", False, False)):
        t0 = time.perf_counter()
        e = ImageEncoder(ggufs[wt], backend=CUDABackend("cuda", allow_tf32=tf32, graphs=graphs))
        e.set_input(x_np)
        e.evaluate()
        first = time.perf_counter() - t0
        out = e.embedding_array()
        times = timed(e.evaluate, args.runs)
        err = rel_err(e.embedding_array(), ref)
        note = f"{len(e.graph.nodes)} nodes; load+plan+first {first:.1f} s"
        cg = e.backend.cuda_graph(e.graph)
        if graphs:
            note += f"; CUDA graph {cg.nodes} nodes" if cg is not None else "; CUDA graph capture FAILED"
        rows.append(("ggpy CUDA", label, times, err, note))
        assert out.shape == (1, 256, 64, 64)
        if graphs:
            totals = []
            for _ in range(3):
                st, bk = e.profile()
                totals.append((sum(st.values()), st, bk))
            totals.sort(key=lambda t: t[0])
            profiles[label] = totals[1]
            memory[label] = (e.planned_bytes, e.intermediate_bytes, e.model.nbytes)
        flops = flops_per_image(e.hp)
        e = None
    print("ggpy done", flush=True)

    # -- torch.compile (subprocess, time-limited) -----------------------------------------------------
    compile_note = "skipped (--no-compile)"
    if not args.no_compile:
        cmd = [sys.executable, __file__, "--compile-child", "--runs", str(args.runs), "--checkpoint", str(ckpt),
               "--input", str(tmp / "x.npy"), "--reference", str(tmp / "ref.npy")]
        t0 = time.perf_counter()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.compile_timeout, check=False,
                                 env=dict(os.environ, PYTHONUNBUFFERED="1"))
            out_lines = res.stdout.splitlines()
            compile_note = f"exit {res.returncode} after {time.perf_counter() - t0:.0f} s"
            if res.returncode:
                compile_note += ": " + " | ".join(res.stderr.strip().splitlines()[-3:])
        except subprocess.TimeoutExpired as e:
            out_lines = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")).splitlines()
            compile_note = f"did not finish within {args.compile_timeout:.0f} s (rows missing below were skipped)"
        for line in out_lines:
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                rows.append(("torch.compile", r["label"], np.array(r["times"]), r["err"],
                             f"compiled+first run {r['compile_s']:.0f} s"))
    print(f"torch.compile: {compile_note}", flush=True)

    # -- report ---------------------------------------------------------------------------------------
    base = {prec: float(np.median(t)) for rt, prec, t, _, _ in rows if rt == "PyTorch eager"}
    print(f"\n## MobileSAM image encoder, batch 1, 1024x1024, {torch.cuda.get_device_name()} "
          f"({flops / 1e9:.1f} GFLOP per image), median of {args.runs} runs\n")
    print("| runtime | precision | median ms | min ms | vs PyTorch eager F32 | rel. error vs PyTorch F32 | notes |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for rt, prec, t, err, note in rows:
        med = np.median(t) * 1e3
        print(f"| {rt} | {prec} | {med:.2f} | {t.min() * 1e3:.2f} | {base['F32'] * 1e3 / med:.2f}x | {err:.2e} | "
              f"{note} |")
    print(f"\ntorch.compile: {compile_note}")
    print(f"PyTorch eager F32 peak allocated: {eager_peak / 2**20:.1f} MiB (weights included)")
    for label, (planned, no_reuse, weights) in memory.items():
        print(f"ggpy {label}: planned device memory {planned / 2**20:.1f} MiB (no reuse: {no_reuse / 2**20:.1f} MiB)"
              f" + weights {weights / 2**20:.1f} MiB")
    for label, (total, by_stage, by_kernel) in profiles.items():
        print(f"\nggpy {label}: GPU time {total * 1e3:.2f} ms (profiled, median of 3); per stage: "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in by_stage.items()))
        top = sorted(by_kernel.items(), key=lambda kv: -kv[1])
        print("  per kernel (ms): " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in top[:20])
              + (f", {len(top) - 20} more {sum(v for _, v in top[20:]) * 1e3:.3f}" if len(top) > 20 else ""))
    g = {prec: float(np.median(t)) for rt, prec, t, _, _ in rows if rt == "ggpy CUDA"}
    tc = {prec: float(np.median(t)) for rt, prec, t, _, _ in rows if rt == "torch.compile"}
    print(f"\nSUMMARY mobilesam_gpu: ggpy F32 {g.get('F32', 0) * 1e3:.2f} ms / TF32 {g.get('TF32', 0) * 1e3:.2f} / "
          f"F16w {g.get('F16 weights', 0) * 1e3:.2f} | torch eager F32 {base['F32'] * 1e3:.2f} / "
          f"TF32 {base['TF32'] * 1e3:.2f} / F16 half {base['F16 model.half()'] * 1e3:.2f} / "
          f"F32 batch 8 {base['F32 batch 8, per image'] * 1e3:.2f} per image"
          + (f" | torch.compile F32 {tc.get('F32', 0) * 1e3:.2f} / TF32 {tc.get('TF32', 0) * 1e3:.2f}" if tc else ""))


if __name__ == "__main__":
    main()
