"""Convolution benchmark: ggpy's CPU implementations side by side with PyTorch and ggml's figures.

    python benchmarks/conv_cpu.py [-t 1 2] [--rounds N] [--calls N] [-k NAME_PART]

Cases: depthwise (the table of ggml PR #1152), dense conv_2d shapes of issue 3 and MobileSAM, and the two
transposed convolutions of SAM's mask decoder.

For each case every ggpy implementation is forced in turn (CPUBackend(force=...)), and "chosen" runs what
the backend picks by itself; all are timed round-robin with PyTorch's conv2d (channels_last for the CWHN
layout): per round, one warm-up call then the median of --calls timed calls; the table gives the median over
rounds. The table also shows the figures the real ggml library measured on this machine type
(../shared/ANCHORS.md) and the scratch each plan reserved.
"""
import argparse
import time

import numpy as np

import ggpy

try:
    import torch
except ImportError:      # optional
    torch = None

# (name, op, impls, (W, H, Cin), Cout, kernel, stride, pad, layout, ggml ms per impl at 2 threads)
CASES = [
    ("dw 3x3 256x256x256 WHCN", "conv_2d_dw", ("im2col", "direct"), (256, 256, 256), 256, 3, 1, 1, "whcn",
     {"im2col": 807, "direct": 126}),
    ("dw 3x3 256x256x256 CWHN", "conv_2d_dw", ("direct",), (256, 256, 256), 256, 3, 1, 1, "cwhn", {"direct": 23}),
    ("dw 3x3 1024x1024x3 WHCN", "conv_2d_dw", ("im2col", "direct"), (1024, 1024, 3), 3, 3, 1, 1, "whcn",
     {"im2col": 150, "direct": 32}),
    ("dw 3x3 1024x1024x3 CWHN", "conv_2d_dw", ("direct",), (1024, 1024, 3), 3, 3, 1, 1, "cwhn", {"direct": 69}),
    ("conv 3x3 64x64 160->160", "conv_2d", ("im2col", "winograd", "direct", "chosen"), (64, 64, 160), 160, 3, 1,
     1, "whcn", {"im2col": 32.8, "direct": 42.3}),
    ("neck 3x3 64x64 256->256", "conv_2d", ("im2col", "winograd", "chosen"), (64, 64, 256), 256, 3, 1, 1, "whcn",
     {}),
    ("conv 1x1 64x64 320->256", "conv_2d", ("gemm_1x1", "im2col", "chosen"), (64, 64, 320), 256, 1, 1, 0, "whcn",
     {"im2col": 11.9}),
    ("stem 3x3 s2 1024x1024 3->32", "conv_2d", ("direct", "im2col", "chosen"), (1024, 1024, 3), 32, 3, 2, 1,
     "whcn", {}),
    ("conv 3x3 s2 512x512 32->64", "conv_2d", ("im2col", "direct", "chosen"), (512, 512, 32), 64, 3, 2, 1, "whcn",
     {}),
    ("convT 2x2 s2 64x64 256->64", "conv_transpose_2d", ("gemm", "direct"), (64, 64, 256), 64, 2, 2, 0, "whcn",
     {}),
    ("convT 2x2 s2 128x128 64->32", "conv_transpose_2d", ("gemm", "direct"), (128, 128, 64), 32, 2, 2, 0,
     "whcn", {}),
]


def build(op, impl, shape, cout, k, stride, pad, layout, threads, rng):
    """A planned one-node graph (input and kernel set) and the plan, with `impl` forced ("chosen": the
    backend's own choice)."""
    w, h, cin = shape
    backend = ggpy.CPUBackend(n_threads=threads, force=None if impl == "chosen" else {op: impl})
    ctx = ggpy.Context()
    if layout == "cwhn":
        stored = ctx.new_tensor(ggpy.F32, (cin, w, h, 1))
        x = ggpy.permute(stored, 2, 0, 1, 3)             # ne = (W, H, C, 1), channels contiguous
    else:
        stored = x = ctx.new_tensor(ggpy.F32, (w, h, cin, 1))
    if op == "conv_transpose_2d":
        kern = ctx.new_tensor(ggpy.F32, (k, k, cout, cin))
        y = ggpy.conv_transpose_2d(kern, x, stride)
    else:
        kern = ctx.new_tensor(ggpy.F32, (k, k, 1, cout) if op == "conv_2d_dw" else (k, k, cin, cout))
        y = getattr(ggpy, op)(kern, x, stride, stride, pad, pad, 1, 1)
    graph = ggpy.Graph().build_forward_expand(y)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    xv = rng.standard_normal(tuple(reversed(stored.ne))).astype(np.float32)
    kv = rng.standard_normal(tuple(reversed(kern.ne))).astype(np.float32)
    stored.set(xv)
    kern.set(kv)
    backend.compute(graph)
    temp = max((r.temp_bytes for r in plan.timeline), default=0)
    return (lambda: backend.compute(graph)), temp, plan.timeline[-1].kernel, xv, kv


def torch_call(op, shape, cout, k, stride, pad, layout, xv, kv):
    w, h, cin = shape
    x = torch.from_numpy(xv.reshape(1, h, w, cin).transpose(0, 3, 1, 2).copy() if layout == "cwhn" else xv)
    if layout == "cwhn":
        x = x.contiguous(memory_format=torch.channels_last)
    if op == "conv_transpose_2d":
        kt = torch.from_numpy(kv)
        return lambda: torch.nn.functional.conv_transpose2d(x, kt, stride=stride)
    kt = torch.from_numpy(kv.reshape(cout, 1 if op == "conv_2d_dw" else cin, k, k))
    groups = cin if op == "conv_2d_dw" else 1
    return lambda: torch.nn.functional.conv2d(x, kt, stride=stride, padding=pad, groups=groups)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-t", "--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per round (their median counts)")
    parser.add_argument("-k", "--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"rounds={args.rounds} calls={args.calls}" + (f" torch {torch.__version__}" if torch else " (torch not installed)"))
    print(f"{'case':<30} {'thr':>3} {'impl':<10} {'kernel':<26} {'ggpy ms':>9} {'torch ms':>9} {'torch/ggpy':>10} "
          f"{'ggml ms':>8} {'scratch':>10}")
    for threads in args.threads:
        if torch is not None:
            torch.set_num_threads(threads)
        for name, op, impls, shape, cout, k, stride, pad, layout, ggml_ms in CASES:
            if args.only not in name:
                continue
            runs, info = {}, {}
            for impl in impls:
                run, temp, kname, xv, kv = build(op, impl, shape, cout, k, stride, pad, layout, threads, rng)
                runs[impl], info[impl] = run, (temp, kname)
            if torch is not None:
                runs["torch"] = torch_call(op, shape, cout, k, stride, pad, layout, xv, kv)
            times = {key: [] for key in runs}
            for _ in range(args.rounds):
                for key, f in runs.items():
                    time.sleep(0.15)      # BLAS and OpenMP threads of the previous library spin ~0.1 s
                    f()
                    calls = []
                    for _ in range(args.calls):
                        t0 = time.perf_counter()
                        f()
                        calls.append(time.perf_counter() - t0)
                    times[key].append(float(np.median(calls)))
            med = {key: float(np.median(v)) * 1e3 for key, v in times.items()}
            for impl in impls:
                tr = med.get("torch")
                ratio = f"{tr / med[impl]:10.2f}" if tr else f"{'-':>10}"
                g = ggml_ms.get(impl) if threads == 2 else None
                print(f"{name:<30} {threads:>3} {impl:<10} {info[impl][1]:<26} {med[impl]:9.2f} "
                      f"{(f'{tr:9.2f}' if tr else '-'):>9} {ratio} {(f'{g:8.1f}' if g else '-'):>8} "
                      f"{info[impl][0] / 2**20:9.2f}M", flush=True)


if __name__ == "__main__":
    main()
