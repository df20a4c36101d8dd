"""Where a generated token's time goes: the single-token graph's kernels timed one by one (GraphRunner.profile),
summed by kernel name, beside the whole token's time.

    python benchmarks/llama_profile.py -m MODEL.gguf [-b cuda|cpu] [--depth 512] [-t THREADS] [--top 25]

The model reads `depth` seeded random tokens, generates a few greedy tokens (planning and capturing the token
graph), then profiles one more token: rows are kernels by total time, with their count and mean. With --trace
(CUDA, needs torch): 16 tokens run as generation runs them (one CUDA graph each) under torch.profiler, whose CUPTI
trace gives each kernel's time on the device inside the graph; the token's time less the kernels' sum is the gaps
between them (launch latency), negative under PDL, where a kernel starts (and is timed) while the one before it runs.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-b", "--backend", default="cuda")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--no-pdl", action="store_true", help="CUDA kernels without programmatic dependent launch")
    p.add_argument("--trace", action="store_true", help="device kernel times inside the CUDA graph (torch.profiler)")
    opts = p.parse_args(argv)
    from ggpy.models.llama.gguf_file import open_llama
    from ggpy.models.llama.runner import GraphModel
    from ggpy.models.llama.sampling import Sampler
    from ggpy.backends import make_backend
    backend = make_backend(opts.backend, opts.threads, **({"pdl": False} if opts.no_pdl else {}))
    model = GraphModel(open_llama(opts.model), backend, n_ctx=opts.depth + 64)
    ids = [int(t) for t in np.random.default_rng(0).integers(0, model.hp.n_vocab, max(opts.depth, 1))]  # depth 0: one
    greedy = Sampler(temp=0)
    token = model.next_token(ids, greedy)
    for _ in range(8):
        token = model.next_token([token], greedy)
    t0 = time.perf_counter()
    for _ in range(16):
        token = model.next_token([token], greedy)
    per_token = (time.perf_counter() - t0) / 16
    if opts.trace:
        return trace(model, token, greedy, per_token, opts)
    rows = model._lanes[True].runner.profile()
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        by_name[r.name][0] += 1
        by_name[r.name][1] += r.seconds
    total = sum(v[1] for v in by_name.values())
    print(f"{opts.model} on {model.backend}: depth {opts.depth}, {per_token * 1e3:.3f} ms a token "
          f"({1 / per_token:.0f} tok/s); {len(rows)} kernels timed one by one: {total * 1e3:.3f} ms")
    print("| kernel | count | total us | mean us | share |\n| --- | --- | --- | --- | --- |")
    for name, (n, s) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:opts.top]:
        print(f"| {name} | {n} | {s * 1e6:.0f} | {s / n * 1e6:.1f} | {s / total:.1%} |")


def trace(model, token, greedy, per_token, opts, n=16):
    """Kernel times on the device inside the token graphs (CUPTI through torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            token = model.next_token([token], greedy)
    rows = [(e.key, e.count / n, e.device_time_total / n) for e in prof.key_averages()
            if e.device_time_total > 0 and e.count]
    total = sum(r[2] for r in rows)
    print(f"{opts.model}: depth {opts.depth}, {per_token * 1e6:.0f} us a token; kernels on the device "
          f"{total:.0f} us in {sum(r[1] for r in rows):.0f} kernels, gaps {per_token * 1e6 - total:.0f} us")
    print("| kernel | per token | us per token | mean us |\n| --- | --- | --- | --- |")
    for name, count, us in sorted(rows, key=lambda r: -r[2])[:opts.top]:
        print(f"| {name[:60]} | {count:.0f} | {us:.1f} | {us / max(count, 1e-9):.2f} |")


if __name__ == "__main__":
    main()
