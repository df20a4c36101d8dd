"""MobileSAM image encoder on the GPU: ggpy's CUDA backend vs PyTorch eager and torch.compile, in one run.

    python benchmarks/mobilesam_gpu.py [--runs N] [--no-compile] [--compile-timeout S] [--compile-modes M,...]
                                       [--quick DTYPES]

1024x1024, one seeded random checkpoint (BatchNorms, LayerNorms and attention biases randomised) in the
official architecture: PyTorch runs the official `mobile_sam` model, ggpy its GGUF conversion. Rows, at batch 1
and batch 8 (time per image): ggpy F32, TF32 (F32 GEMMs rounding inputs to TF32), F16 and BF16 activations
(--dtype), each replaying one captured CUDA graph; PyTorch eager F32 (TF32 off), TF32, model.half() and
model.bfloat16(); torch.compile mode="reduce-overhead" (CUDA graphs, like ggpy; and the modes given with
--compile-modes, e.g. max-autotune) in TF32, half and bfloat16, in a subprocess given --compile-timeout
seconds in all (rows it did not reach are missing, and said so). Each time is the median (and min) of N timed
calls after warm-ups, every call ending with a synchronize; errors are ||a-b||/||b|| against PyTorch's F32
embedding; TFLOP/s are the encoder's multiply-adds x 2 per second (H100 dense peaks: TF32 ~495, F16/BF16 ~989).
Also printed: ggpy's GPU time per kernel (a profiled evaluation) with its bytes and FLOP/s against the GPU's peaks
(kernel_costs.py), its planned device memory and weights, and PyTorch's peak allocated memory. Needs torch with
CUDA, mobile_sam, gguf, cuda-python and nvmath-python.
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
from kernel_costs import cost_table, kernel_costs, peaks_of

from ggpy.models.mobilesam.timm_stub import install_timm_stub

install_timm_stub()

PRECISIONS = {"TF32": (torch.float32, True), "half": (torch.float16, False), "bf16": (torch.bfloat16, False),
              "F32": (torch.float32, False)}
BATCHES = (1, 8)


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
    from ggpy.models.mobilesam.random_checkpoint import load_reference_model
    return load_reference_model(checkpoint).image_encoder.cuda().eval()


def compile_main(args):
    """Subprocess: torch.compile the encoder in each mode, precision and batch; one JSON line per result."""
    ref = np.load(args.reference)
    x1 = torch.from_numpy(np.load(args.input)).cuda()
    for mode in args.compile_modes.split(","):
        for label in ("TF32", "half", "bf16"):
            dtype, tf32 = PRECISIONS[label]
            set_tf32(tf32)
            enc = torch_model(args.checkpoint).to(dtype)
            for batch in BATCHES:
                torch._dynamo.reset()
                compiled = torch.compile(enc, mode=mode)
                x = x1.to(dtype).expand(batch, -1, -1, -1).contiguous()

                def fn(compiled=compiled, x=x):      # a new step of the CUDA graph trees, as a training loop does
                    torch.compiler.cudagraph_mark_step_begin()
                    return compiled(x)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = fn()[:1].float().cpu().numpy()
                    compile_s = time.perf_counter() - t0
                    times = timed(fn, args.runs) / batch
                    err = rel_err(out, ref)
                print("RESULT " + json.dumps({"label": f"{label}, {mode}", "batch": batch, "times": times.tolist(),
                                              "err": err, "compile_s": compile_s}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-timeout", type=float, default=420.0)
    p.add_argument("--compile-modes", default="reduce-overhead")
    p.add_argument("--quick", metavar="DTYPES", help="only ggpy in these --dtype values (e.g. f16,bf16) against "
                   "PyTorch's F32 reference: no other PyTorch rows, autotune or torch.compile (for iterating on kernels)")
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--reference", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.compile_child:
        return compile_main(args)

    import ggpy
    from ggpy.models.mobilesam.convert import convert
    from ggpy.models.mobilesam.random_checkpoint import make_random_checkpoint
    from ggpy.models.mobilesam.runner import ImageEncoder, flops_per_image
    from ggpy.backends.cuda.backend import CUDABackend

    tmp = Path(tempfile.mkdtemp(prefix="mobilesam-gpu-"))
    t0 = time.perf_counter()
    ckpt = tmp / "mobile_sam_random.pt"
    make_random_checkpoint(ckpt, seed=0)
    gguf = tmp / "mobilesam_f32.gguf"
    convert(ckpt, gguf, type="f32", progress=False)
    print(f"random checkpoint and GGUF in {time.perf_counter() - t0:.1f} s; {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, ggpy {getattr(ggpy, '__version__', '?')}", flush=True)

    x_np = np.random.default_rng(0).standard_normal((1, 3, 1024, 1024)).astype(np.float32)
    x = torch.from_numpy(x_np).cuda()
    rows = []          # (runtime, precision, batch, times per image, err, note)

    # -- PyTorch eager ------------------------------------------------------------------------------
    torch.cuda.reset_peak_memory_stats()
    set_tf32(False)
    with torch.inference_mode():
        ref = torch_model(ckpt)(x).float().cpu().numpy()
        eager_peak = torch.cuda.max_memory_allocated()
        for label in ("F32",) if args.quick else ("F32", "TF32", "half", "bf16"):
            dtype, tf32 = PRECISIONS[label]
            set_tf32(tf32)
            enc = torch_model(ckpt).to(dtype)
            for batch in BATCHES:
                xb = x.to(dtype).expand(batch, -1, -1, -1).contiguous()
                out = enc(xb)[:1].float().cpu().numpy()
                rows.append(("PyTorch eager", label, batch, timed(lambda e=enc, i=xb: e(i), args.runs) / batch,
                             rel_err(out, ref), ""))
            enc = xb = None
    set_tf32(False)
    torch.cuda.empty_cache()
    np.save(tmp / "x.npy", x_np)
    np.save(tmp / "ref.npy", ref)
    print("PyTorch eager done", flush=True)

    # -- ggpy CUDA ----------------------------------------------------------------------------------
    profiles, memory = {}, {}
    ggpy_runs = (("F32", "f32"), ("TF32", "tf32"), ("half", "f16"), ("bf16", "bf16"))
    for label, dtype in [r for r in ggpy_runs if not args.quick or r[1] in args.quick.split(",")]:
        for batch in BATCHES:
            t0 = time.perf_counter()
            e = ImageEncoder(gguf, backend=CUDABackend("cuda", allow_tf32=dtype == "tf32"), dtype=dtype, batch=batch)
            xb = np.repeat(x_np, batch, axis=0)
            e.set_input(xb)
            e.evaluate()
            first = time.perf_counter() - t0
            times = timed(e.evaluate, args.runs) / batch
            out = e.embedding_array()
            assert out.shape == (batch, 256, 64, 64)
            cg = e.backend.cuda_graph(e.graph)
            note = (f"{len(e.graph.nodes)} nodes; load+plan+first {first:.1f} s; "
                    + (f"CUDA graph {cg.nodes} nodes" if cg is not None else "CUDA graph capture FAILED"))
            rows.append(("ggpy CUDA", f"{label} ({dtype})", batch, times, rel_err(out[:1], ref), note))
            totals = sorted((sum(st.values()), st, bk) for st, bk in (e.profile() for _ in range(3)))
            profiles[f"{label} batch {batch}"] = totals[1] + (kernel_costs(e.backend, e.graph, e.runner.profile()),
                                                              dtype, batch)
            memory[f"{label} batch {batch}"] = (e.planned_bytes, e.intermediate_bytes, e.model.nbytes)
            flops = flops_per_image(e.hp)
            e = None
    print("ggpy done", flush=True)

    if args.quick:
        return report(rows, args.runs, flops, "skipped (--quick)", eager_peak, memory, profiles)
    # -- ggpy CUDA with autotune: the first build measures, a second (the process's winners dropped) reads the disk
    from ggpy.backends.cuda import autotune
    os.environ["GGPY_AUTOTUNE_CACHE"] = str(tmp / "autotune")
    for label, dtype in (("TF32", "tf32"), ("half", "f16")):
        for batch in BATCHES:
            builds = []
            for _ in range(2):
                autotune.WINNERS.memory.clear()
                before = dict(autotune.WINNERS.stats)
                t0 = time.perf_counter()
                e = ImageEncoder(gguf, backend=CUDABackend("cuda", autotune=True, allow_tf32=dtype == "tf32"), dtype=dtype,
                                 batch=batch)
                e.set_input(np.repeat(x_np, batch, axis=0))
                e.evaluate()
                builds.append((time.perf_counter() - t0, {k: autotune.WINNERS.stats[k] - before[k] for k in before}))
            times = timed(e.evaluate, args.runs) / batch
            (t1, s1), (t2, s2) = builds
            rows.append(("ggpy CUDA autotune", f"{label} ({dtype})", batch, times, rel_err(e.embedding_array()[:1], ref),
                         f"first build+run {t1:.1f} s ({s1['measured']} measured); with the plan cache {t2:.1f} s "
                         f"({s2['measured']} measured, {s2['disk_hits']} read from disk)"))
            e = None
    print("ggpy autotune done", flush=True)

    # -- torch.compile (subprocess, time-limited) -----------------------------------------------------
    compile_note = "skipped (--no-compile)"
    if not args.no_compile:
        cmd = [sys.executable, __file__, "--compile-child", "--runs", str(args.runs), "--checkpoint", str(ckpt),
               "--input", str(tmp / "x.npy"), "--reference", str(tmp / "ref.npy"),
               "--compile-modes", args.compile_modes]
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
                rows.append(("torch.compile", r["label"], r["batch"], np.array(r["times"]), r["err"],
                             f"compiled+first run {r['compile_s']:.0f} s"))
    print(f"torch.compile: {compile_note}", flush=True)
    report(rows, args.runs, flops, compile_note, eager_peak, memory, profiles)


def report(rows, runs, flops, compile_note, eager_peak, memory, profiles):
    """The table (one row per runtime, precision and batch), memory, per-kernel times and a SUMMARY line."""
    print(f"\n## MobileSAM image encoder, 1024x1024, {torch.cuda.get_device_name()} ({flops / 1e9:.1f} GFLOP per "
          f"image), median of {runs} runs, time per image\n")
    print("| runtime | precision | batch | median ms | min ms | TFLOP/s | rel. error vs PyTorch F32 | notes |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for rt, prec, batch, t, err, note in rows:
        med = np.median(t)
        print(f"| {rt} | {prec} | {batch} | {med * 1e3:.2f} | {t.min() * 1e3:.2f} | {flops / med / 1e12:.1f} | "
              f"{err:.2e} | {note} |")
    print(f"\ntorch.compile: {compile_note}")
    print(f"PyTorch eager F32 peak allocated: {eager_peak / 2**20:.1f} MiB (weights included)")
    for label, (planned, no_reuse, weights) in memory.items():
        print(f"ggpy {label}: planned device memory {planned / 2**20:.1f} MiB (no reuse: {no_reuse / 2**20:.1f} MiB)"
              f" + weights {weights / 2**20:.1f} MiB")
    peaks = peaks_of(torch.cuda.get_device_name())
    for label, (total, by_stage, _, costs, dtype, batch) in profiles.items():
        print(f"\nggpy {label}: GPU time {total * 1e3:.2f} ms (profiled, median of 3); per stage: "
              + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in by_stage.items()))
        print("per kernel, ms an image (one more profiled evaluation; bytes and FLOP from the shapes):\n"
              + cost_table(costs, peaks, dtype, per=batch, top=12))
    med = {(rt.split()[0], prec.split()[0].rstrip(","), b): float(np.median(t)) * 1e3 for rt, prec, b, t, _, _ in rows
           if "autotune" not in rt}
    cells = []
    for prec in ("F32", "TF32", "half", "bf16"):
        for b in BATCHES:
            vals = [f"{who} {med[(who, prec, b)]:.2f}" for who in ("ggpy", "PyTorch", "torch.compile")
                    if (who, prec, b) in med]
            cells.append(f"{prec} b{b}: " + " / ".join(vals))
    print("\nSUMMARY mobilesam_gpu (ms per image): " + " | ".join(cells))


if __name__ == "__main__":
    main()
