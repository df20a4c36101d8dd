"""Quantized mul_mat on the CPU: ggpy with a quantized weight vs numpy's float32 matmul on the same weight
dequantized (by gguf.quants), same thread count, side by side.

    python benchmarks/quant_cpu.py [-t THREADS] [--rounds N] [--seconds S] [--types q4_1,q8_0,q4_k,q6_k]

Weights of ne = (K, M) = (576, 1536) and (1536, 576) (SmolLM2-135M's feed-forward; the K-quants, whose rows are
whole blocks of 256, take K = 512 for 576), x of N = 1 (generation) and N = 64 rows. Each round gives every
implementation a short pause, S seconds of warm-up calls and S seconds of timed consecutive calls; the table shows
the medians per call over the rounds, GFLOP/s (2 M N K flops) and numpy's time over ggpy's. The weights stay in
the caches (numpy's float32 ones too: 3.5 MB): these are compute rates, not a model's memory-bound ones.

The last row (--model) is one token of SmolLM2-135M-Q4_1's products: 30 blocks of q, k, v, o (576 x 576,
576 x 192) and gate, up, down (576 x 1536, 1536 x 576) in Q4_1 and the 49152-row output in Q8_0, one graph
of 211 mul_mat nodes whose 96 MB of weights come from memory (numpy: the same products on 538 MB of float32).
"""
import argparse
import time

import gguf
import numpy as np
from threadpoolctl import threadpool_limits

import ggpy
from ggpy.types import type_of

SHAPES = ((576, 1536), (1536, 576))
ROWS = (1, 64)


def planned(backend, wtype, raw, x):
    """A planned mul_mat graph of the quantized weight `raw` (bytes) and x (N, K) float32, evaluated once."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(wtype, (x.shape[1], raw.shape[0]))
    xt = ctx.new_tensor(ggpy.F32, (x.shape[1], x.shape[0]))
    graph = ggpy.Graph().build_forward_expand(ggpy.mul_mat(w, xt))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    w.set(raw)
    xt.set(x.reshape(xt.shape))
    backend.compute(graph)
    return lambda: backend.compute(graph), backend.kernel_name(graph.nodes[-1])


def timed(f, seconds: float) -> float:
    """Seconds per call of f over consecutive calls for `seconds`, after as long warming up (the first
    milliseconds after an idle pause run slower: the threads and the core wake)."""
    for stop in (seconds, seconds):
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < stop:
            f()
            calls += 1
    return (time.perf_counter() - t0) / calls


def model_step(backend, rng, rounds: int):
    """(ggpy ms, numpy ms, flops) of one token's products of SmolLM2-135M-Q4_1 (random weights)."""
    from ggpy.test_backend_ops.cases.util import random_blocks
    shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)] * 30
    ctx = ggpy.Context()
    weights = [ctx.new_tensor(ggpy.Q4_1, ne) for ne in shapes] + [ctx.new_tensor(ggpy.Q8_0, (576, 49152))]
    ggpy.alloc_ctx_tensors(ctx, backend)
    dense, xs, graph = [], {}, ggpy.Graph()
    for w in weights:
        raw = random_blocks(rng, w.type, w.ne)
        w.set(raw)
        dense.append(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(w.type.ggml_id)).reshape(w.ne[1], -1))
        if w.ne[0] not in xs:
            xs[w.ne[0]] = ctx.new_tensor(ggpy.F32, (w.ne[0], 1)).set_input()
        graph.build_forward_expand(ggpy.mul_mat(w, xs[w.ne[0]]))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    vectors = {k: rng.uniform(-1, 1, (1, k)).astype(np.float32) for k in xs}
    for k, x in xs.items():
        x.set(vectors[k].reshape(x.shape))
    impls = {"ggpy": lambda: backend.compute(graph),
             "numpy": lambda: [np.matmul(vectors[w.shape[1]], w.T) for w in dense]}
    times = {key: [] for key in impls}
    for _ in range(rounds):
        for key, f in impls.items():
            time.sleep(0.3)
            times[key].append(timed(f, 0.5))
    flops = sum(2 * w.ne[0] * w.ne[1] for w in weights)
    return float(np.median(times["ggpy"])) * 1e3, float(np.median(times["numpy"])) * 1e3, flops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.05)
    parser.add_argument("--types", default="q4_1,q8_0,q4_k,q6_k")
    parser.add_argument("--model", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    backend = ggpy.CPUBackend(n_threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"threads={args.threads} rounds={args.rounds} seconds={args.seconds} numpy {np.__version__}")
    print(f"{'weight':<18} {'N':>3} {'ggpy kernel':<14} {'ggpy ms':>8} {'numpy ms':>9} {'numpy/ggpy':>10} "
          f"{'ggpy GFLOP/s':>12} {'numpy GFLOP/s':>13}")
    with threadpool_limits(args.threads, user_api="blas"):
        for name in args.types.split(","):
            wtype = type_of(name)
            qtype = gguf.GGMLQuantizationType(wtype.ggml_id)
            for k, m in SHAPES:
                k = k // wtype.block * wtype.block
                w = rng.uniform(-1, 1, (m, k)).astype(np.float32)
                try:
                    raw = gguf.quants.quantize(w, qtype)
                except NotImplementedError:     # K-quants: random blocks with sane scales, as the op tests make
                    from ggpy.test_backend_ops.cases.util import random_blocks
                    raw = random_blocks(rng, wtype, (k, m, 1, 1)).reshape(m, -1)
                dense = gguf.quants.dequantize(raw, qtype)
                for n in ROWS:
                    x = rng.uniform(-1, 1, (n, k)).astype(np.float32)
                    out = np.empty((n, m), np.float32)
                    run, kernel = planned(backend, wtype, raw, x)
                    impls = {"ggpy": run, "numpy": lambda x=x, out=out, dense=dense: np.matmul(x, dense.T, out=out)}
                    times = {key: [] for key in impls}
                    for _ in range(args.rounds):
                        for key, f in impls.items():
                            time.sleep(0.3)      # let the other library's spinning worker threads idle
                            times[key].append(timed(f, args.seconds))
                    g, nump = (float(np.median(times[key])) * 1e3 for key in ("ggpy", "numpy"))
                    flops = 2 * m * n * k
                    print(f"{name} K={k} M={m:<5} {n:>3} {kernel:<14} {g:8.3f} {nump:9.3f} {nump / g:10.2f} "
                          f"{flops / g / 1e6:12.1f} {flops / nump / 1e6:13.1f}", flush=True)
        if args.model:
            g, nump, flops = model_step(backend, rng, args.rounds)
            print(f"{'SmolLM2 token':<18} {1:>3} {'211 nodes':<14} {g:8.3f} {nump:9.3f} {nump / g:10.2f} "
                  f"{flops / g / 1e6:12.1f} {flops / nump / 1e6:13.1f}", flush=True)


if __name__ == "__main__":
    main()
