"""Quantized mul_mat with a batch of columns on the GPU (issue 30: a server's batched decode, a token a sequence): each
product at model shapes as a chain of R distinct model weights in one CUDA graph (over 128 MiB in all: L2 does not
hold them), microseconds per product for the integer dot-product kernels (mmvq; mmvq_b beyond 8 columns) and for
cuBLASLt on a dequantized F16 copy of the weights (cublaslt, forced), N columns of b; then a SmolLM2-shaped random Q4_1
model's batched decode step (BatchModel, 16 sequences a token each, and one), the batch kernels against the products
of more than 8 columns on cuBLASLt (quant.MMVQ_MAX_BATCH = MMV_MAX_N: as before the batch kernels).

    python3 benchmarks/cuda_mmvq_batch.py [--only products|decode] [--ns 1,8,9,16,32] [--model PATH.gguf]
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "models"), str(ROOT / "benchmarks")]

from ggpy.backends.cuda import CUDABackend  # noqa: E402
from ggpy.backends.cuda.kernels import quant  # noqa: E402
from cuda_decode_ops import mat_vec_chain, timed  # noqa: E402

SHAPES = [("smollm2 q/o", "Q4_1", 576, 576), ("smollm2 k/v", "Q4_1", 576, 192), ("smollm2 gate", "Q4_1", 576, 1536),
          ("smollm2 down", "Q4_1", 1536, 576), ("smollm2 head", "Q8_0", 576, 49152),
          ("1b q/o", "Q4_K", 2048, 2048), ("1b gate", "Q4_K", 2048, 8192), ("1b down", "Q6_K", 8192, 2048),
          ("7b gate", "Q4_0", 4096, 11008), ("7b down", "Q4_0", 11008, 4096)]


@contextlib.contextmanager
def patched(**values):
    saved = {k: getattr(quant, k) for k in values}
    for k, v in values.items():
        setattr(quant, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(quant, k, v)


def products(opts):
    rng = np.random.default_rng(0)
    ns = [int(n) for n in opts.ns.split(",")]
    plan = quant.mmvq_batch_plan
    variants = {"mmvq": ({}, {}), "mmvq rw2": ({}, {"mmvq_batch_plan": lambda *a: (2, plan(*a)[1])}),
                "mmvq rw1": ({}, {"mmvq_batch_plan": lambda *a: (1, plan(*a)[1])}),
                "mmvq no copy": ({}, {"mmvq_batch_plan": lambda *a: (plan(*a)[0], 0)}),
                "cublaslt": ({"mul_mat": "cublaslt"}, {})}
    print("| product | shape | N | R | " + " | ".join(f"us {v}" for v in variants) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in variants) + " |")
    for label, t, K, M in SHAPES:
        for N in ns:
            us = {}
            for v, (force, patch) in variants.items():
                if v.startswith("mmvq") and N > quant.MMVQ_MAX_BATCH or v not in ("mmvq", "cublaslt") and N <= quant.MMV_MAX_N:
                    us[v] = float("nan")
                    continue
                with patched(**patch):
                    backend = CUDABackend("cuda", force=force)
                    graph, n, per = mat_vec_chain(backend, t, K, M, rng, n_cols=N, most=128)
                    names = {st.name for st in backend.program(graph)}
                    us[v] = timed(backend, graph, opts.replays) / n * 1e6
                if v == "mmvq":
                    assert not any(s.startswith("cublaslt") for s in names), names
            print(f"| mul_mat {t} | {label} {K}x{M} | {N} | {n} | " + " | ".join(f"{us[v]:.2f}" for v in variants)
                  + " |", flush=True)


def decode(opts):
    from ggpy.models.llama.batch import BatchModel
    from ggpy.models.llama.gguf_file import open_llama
    path = Path(opts.model) if opts.model else None
    if path is None:
        import llama_gpu
        out = Path("/tmp/ggpy-models")
        out.mkdir(parents=True, exist_ok=True)
        path = llama_gpu.write_model(out, "smollm2", "q4_1")
    m = open_llama(path)
    rng = np.random.default_rng(1)
    print("| decode step | sequences | kernels | ms a step (decode_top) | ms a replay (device) | top kernels |\n"
          "| --- | --- | --- | --- | --- | --- |")
    for label, patch in (("batch kernels (mmvq_b)", {}), ("before: cuBLASLt beyond 8", {"MMVQ_MAX_BATCH": quant.MMV_MAX_N})):
        with patched(**patch):
            backend = CUDABackend("cuda")
            model = BatchModel(m, backend, n_ctx=4096, n_seq=16, n_batch=64)
            for n_seq in (1, 16):
                toks = rng.integers(0, m.hparams.n_vocab, (n_seq, 40))
                for s in range(n_seq):          # a prompt of 8 tokens a sequence
                    model.decode_top([(s, 0, [int(t) for t in toks[s, :8]])])
                pos = 8
                for _ in range(5):              # warm up (plans, compiles)
                    model.decode_top([(s, pos, [int(toks[s, pos])]) for s in range(n_seq)])
                    pos += 1
                model.runner.synchronize()
                t0 = time.perf_counter()
                steps = 25
                for _ in range(steps):
                    model.decode_top([(s, pos, [int(toks[s, pos % 40])]) for s in range(n_seq)])
                    pos += 1
                model.runner.synchronize()
                ms = (time.perf_counter() - t0) / steps * 1e3
                graph = model._steps[model._key].graph
                try:            # the step's graph alone, replayed on the device (no host work between steps)
                    dev = f"{timed(backend, graph, 20) * 1e3:.2f}"
                except Exception as e:      # noqa: BLE001 - a benchmark's side measurement
                    dev = f"({type(e).__name__})"
                names = [st.name for st in backend.program(graph)]
                top = {}
                for nm in names:
                    k = nm.split("+")[0]
                    top[k] = top.get(k, 0) + 1
                common = ", ".join(f"{k} {c}" for k, c in sorted(top.items(), key=lambda kv: -kv[1])[:6])
                print(f"| {label} | {n_seq} | {len(names)} | {ms:.2f} | {dev} | {common} |", flush=True)
                if opts.profile and n_seq > 1:
                    busy = {}
                    for tm in backend.profile(graph):
                        k = tm.name.split("+")[0]
                        n, sec = busy.get(k, (0, 0.0))
                        busy[k] = (n + 1, sec + tm.seconds)
                    rows = sorted(busy.items(), key=lambda kv: -kv[1][1])[:14]
                    print("    " + "; ".join(f"{k} {n}x {sec * 1e6:.0f} us" for k, (n, sec) in rows), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("products", "decode"))
    p.add_argument("--ns", default="1,8,9,16,32")
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--profile", action="store_true", help="the 16-sequence step's kernels' times (backend.profile)")
    p.add_argument("--model", default=None, help="a GGUF for the decode step (default: a random SmolLM2-shaped Q4_1)")
    opts = p.parse_args(argv)
    if opts.only in (None, "products"):
        products(opts)
    if opts.only in (None, "decode"):
        decode(opts)


if __name__ == "__main__":
    main()
