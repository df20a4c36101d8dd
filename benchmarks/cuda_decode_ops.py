"""The decode path's kernels one at a time on the GPU: each op of a generated token at the model shapes of issue 28,
as a chain of R copies in one CUDA graph (R distinct weights or caches, over 128 MiB in all so that L2 does not hold
them, as a token's ~30 blocks do not), timed with CUDA events over replays: microseconds per op and the bytes it
must read per microsecond. PDL on and off side by side.

    python3 benchmarks/cuda_decode_ops.py [--only mul_mat|flash_attn_ext] [--replays 20]
"""
from __future__ import annotations

import argparse

import numpy as np

import ggpy
from ggpy.backends.cuda import CUDABackend
from ggpy.backends.cuda.device import Event

L2_DEFEAT = 128 << 20

# (label, weight type, K, M): mat-vecs of a token (SmolLM2-135M: width 576, MLP 1536, vocabulary 49152; Llama-1B:
# width 2048, KV 512, MLP 8192, vocabulary 128256)
MAT_VECS = [("smollm2 q/o", "Q4_1", 576, 576), ("smollm2 k/v", "Q4_1", 576, 192), ("smollm2 gate", "Q4_1", 576, 1536),
            ("smollm2 down", "Q4_1", 1536, 576), ("smollm2 head", "Q8_0", 576, 49152),
            ("1b q/o", "Q4_K", 2048, 2048), ("1b k/v", "Q4_K", 2048, 512), ("1b gate", "Q4_K", 2048, 8192),
            ("1b down", "Q6_K", 8192, 2048), ("1b head", "Q6_K", 2048, 128256),
            ("1b q/o", "Q8_0", 2048, 2048), ("1b gate", "Q8_0", 2048, 8192), ("1b down", "Q8_0", 8192, 2048)]
# (label, head dim, query heads, KV heads, cache rows)
ATTENTION = [("smollm2", 64, 9, 3, 512), ("smollm2", 64, 9, 3, 4096), ("1b", 64, 32, 8, 512), ("1b", 64, 32, 8, 4096),
             ("d128", 128, 32, 8, 512), ("d128", 128, 32, 8, 4096)]


def random_blocks(t, rng) -> np.ndarray:
    """Random bytes for a quantized tensor with finite F16 scales (every block's scale bytes overwritten)."""
    raw = rng.integers(0, 256, t.storage_shape, dtype=np.uint8)
    flat = raw.reshape(-1, t.type.size)
    flat[:, :2] = np.frombuffer(np.full(len(flat), 0.01, np.float16).tobytes(), np.uint8).reshape(-1, 2)
    if t.type in (ggpy.Q4_K, ggpy.Q5_K):
        flat[:, 2:4] = flat[:, :2]
    if t.type is ggpy.Q6_K:
        flat[:, -2:] = flat[:, :2]
    return raw


def timed(backend, graph, replays: int) -> float:
    """Seconds of one replay of the planned graph (median-free: the mean over `replays` after a warm-up)."""
    backend.compute(graph)
    start, end = Event(), Event()
    start.record(backend.stream)
    for _ in range(replays):
        backend.compute_async(graph)
    end.record(backend.stream)
    return Event.elapsed(start, end) / replays


def mat_vec_chain(backend, type_name: str, K: int, M: int, rng):
    t = getattr(ggpy, type_name)
    per = t.row_bytes(K) * M
    n = max(4, min(256, L2_DEFEAT // per))
    ctx, wctx = ggpy.Context(), ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (K, 1)).set_input()
    ws = [wctx.new_tensor(t, (K, M)) for _ in range(n)]
    ggpy.alloc_ctx_tensors(wctx, backend)       # model weights (as a model's): mmvq loads them before the grid wait
    graph = ggpy.Graph()
    for w in ws:
        graph.build_forward_expand(ggpy.mul_mat(w, x))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    x.set(rng.standard_normal(x.shape).astype(np.float32))
    for w in ws:
        w.set(random_blocks(w, rng))
    return graph, n, per


def attention_chain(backend, d: int, h: int, hk: int, nkv: int, rng):
    per = 2 * d * hk * nkv * 2
    n = max(4, min(64, L2_DEFEAT // per))
    ctx = ggpy.Context()
    q = ctx.new_tensor(ggpy.F32, (d, 1, h)).set_input()
    mask = ctx.new_tensor(ggpy.F32, (nkv, 1)).set_input()
    kvs = [(ctx.new_tensor(ggpy.F16, (d, nkv, hk)), ctx.new_tensor(ggpy.F16, (d, nkv, hk))) for _ in range(n)]
    graph = ggpy.Graph()
    for k, v in kvs:
        graph.build_forward_expand(ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    q.set(rng.standard_normal(q.shape).astype(np.float32))
    mask.set(np.zeros(mask.shape, np.float32))
    for k, v in kvs:
        for t in (k, v):
            t.set(rng.standard_normal(t.shape).astype(np.float16))
    return graph, n, per


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("mul_mat", "flash_attn_ext"))
    p.add_argument("--replays", type=int, default=20)
    opts = p.parse_args(argv)
    backends = {"pdl": CUDABackend("cuda"), "no pdl": CUDABackend("cuda", pdl=False)}
    rng = np.random.default_rng(0)
    print(f"decode ops on {backends['pdl'].device.name}: us per op in a chain of R inside one CUDA graph")
    print("| op | shape | R | us (pdl) | us (no pdl) | GB/s read (pdl) |\n| --- | --- | --- | --- | --- | --- |")
    jobs = []
    if opts.only in (None, "mul_mat"):
        jobs += [(f"mul_mat {t}", f"{label} {K}x{M}", lambda b, t=t, K=K, M=M: mat_vec_chain(b, t, K, M, rng))
                 for label, t, K, M in MAT_VECS]
    if opts.only in (None, "flash_attn_ext"):
        jobs += [("flash_attn_ext F16", f"{label} d{d} {h}/{hk} heads, {nkv} rows",
                  lambda b, d=d, h=h, hk=hk, nkv=nkv: attention_chain(b, d, h, hk, nkv, rng))
                 for label, d, h, hk, nkv in ATTENTION]
    for op, shape, make in jobs:
        us = {}
        for name, backend in backends.items():
            graph, n, per = make(backend)
            us[name] = timed(backend, graph, opts.replays) / n * 1e6
        print(f"| {op} | {shape} | {n} | {us['pdl']:.2f} | {us['no pdl']:.2f} | {per / us['pdl'] / 1e3:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
