"""The decode path's kernels one at a time on the GPU: each op of a generated token at the model shapes of issue 28,
as a chain of R copies in one CUDA graph (R distinct weights or caches, over 128 MiB in all so that L2 does not hold
them, as a token's ~30 blocks do not), timed with CUDA events over replays: microseconds per op and the bytes it
must read per microsecond. PDL on and off side by side.

    python3 benchmarks/cuda_decode_ops.py [--only mul_mat|flash_attn_ext|floor] [--replays 20] [--cache F16,Q8_0]
        [--chunks 1,4,16] [--rows 1,2] [--label gemma3]

flash_attn_ext reads its K and V as a model's cache (one (head dim x KV heads, rows) tensor each, heads interleaved in a
row), F16 or Q8_0, with a mask whose padded tail is -inf as a token's (rows in use rounded up); --chunks also times
each shape with fa_vec_k's keys split in that many chunks (attention_flash.split forced; 0: as it chooses with no
clusters); --rows also with fa_vec_k's (query head, row) pairs a block capped at each of these (attention_flash.MAX_ROWS
and ONE_ROW_RB forced, SMALL_GROUP off: fewer pairs a block, more blocks, each key read by more of them). `floor`: a scale of 64
floats in the same chain, the per-op cost of a launch with no work.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools

import numpy as np

import ggpy
from ggpy.backends.cuda import CUDABackend
from ggpy.backends.cuda.device import Event
from ggpy.backends.cuda.kernels import attention_flash

L2_DEFEAT = 128 << 20

# (label, weight type, K, M): mat-vecs of a token (SmolLM2-135M: width 576, MLP 1536, vocabulary 49152; Llama-1B:
# width 2048, KV 512, MLP 8192, vocabulary 128256)
MAT_VECS = [("smollm2 q/o", "Q4_1", 576, 576), ("smollm2 k/v", "Q4_1", 576, 192), ("smollm2 gate", "Q4_1", 576, 1536),
            ("smollm2 down", "Q4_1", 1536, 576), ("smollm2 head", "Q8_0", 576, 49152),
            ("1b q/o", "Q4_K", 2048, 2048), ("1b k/v", "Q4_K", 2048, 512), ("1b gate", "Q4_K", 2048, 8192),
            ("1b down", "Q6_K", 8192, 2048), ("1b head", "Q6_K", 2048, 128256),
            ("1b q/o", "Q8_0", 2048, 2048), ("1b gate", "Q8_0", 2048, 8192), ("1b down", "Q8_0", 8192, 2048)]
# (label, head dim, query heads, KV heads, cache rows read, rows in use (the rest masked -inf))
ATTENTION = [(label, 64, h, hk, nkv, used) for label, h, hk in (("smollm2", 9, 3), ("1b", 32, 8))
             for nkv, used in ((256, 256), (576, 513), (1536, 1500), (4096, 4096), (4224, 4160))]
ATTENTION += [("d128", 128, 32, 8, 576, 513), ("d128", 128, 32, 8, 4096, 4096)]
ATTENTION += [("gemma3", 256, 4, 1, 512, 512), ("gemma3", 256, 4, 1, 4096, 4096),   # 512 used of 4096: the live keys
              ("gemma3", 256, 4, 1, 4096, 512)]                                  # of a sliding block's window
CACHE_TYPES = ("F16", "Q8_0")


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


def mat_vec_chain(backend, type_name: str, K: int, M: int, rng, n_cols: int = 1, most: int = 256):
    """(graph, R, bytes of a weight): R (at most `most`) distinct (K, M) weights of the type, each times the same
    (K, n_cols) activations."""
    t = getattr(ggpy, type_name)
    per = t.row_bytes(K) * M
    n = max(4, min(most, L2_DEFEAT // per))
    ctx, wctx = ggpy.Context(), ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (K, n_cols)).set_input()
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


def attention_chain(backend, d: int, h: int, hk: int, nkv: int, used: int, cache: str, rng):
    t = getattr(ggpy, cache)
    per = 2 * t.row_bytes(d * hk) * nkv
    n = max(4, min(64, L2_DEFEAT // per))
    ctx = ggpy.Context()
    q = ctx.new_tensor(ggpy.F32, (d, 1, h)).set_input()
    mask = ctx.new_tensor(ggpy.F16, (nkv, 1)).set_input()
    caches = [ctx.new_tensor(t, (d * hk, nkv)).set_input() for _ in range(2 * n)]
    graph = ggpy.Graph()
    for kc, vc in zip(caches[::2], caches[1::2]):
        k, v = (ggpy.view_3d(c, d, nkv, hk, c.nb[1], c.nb[1] // hk) for c in (kc, vc))
        graph.build_forward_expand(ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    q.set(rng.standard_normal(q.shape).astype(np.float32))
    mask.set(np.where(np.arange(nkv) < used, 0.0, -np.inf).astype(np.float16).reshape(mask.shape))
    for c in caches:
        c.set(random_blocks(c, rng) if t is ggpy.Q8_0 else rng.standard_normal(c.shape).astype(np.float16))
    return graph, n, per


def floor_chain(backend, rng):
    """A scale of 64 floats, 64 times: the per-op cost of a launch that does nothing."""
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (64,)).set_input()
    graph, y = ggpy.Graph(), x
    for _ in range(64):
        y = ggpy.scale(y, 1.0)
        graph.build_forward_expand(y)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    x.set(rng.standard_normal(64).astype(np.float32))
    return graph, 64, 256


@contextlib.contextmanager
def split_as(chunks: int | None, rows: int | None = None):
    """attention_flash.split as it chooses (None), with no clusters (0), or with `chunks` chunks of keys; with `rows`,
    at most that many (query head, row) pairs a block."""
    names = ("TARGET_BLOCKS", "MIN_CHUNK", "MAX_CHUNKS", "CLUSTER_MAX_KEYS", "ONE_ROW_RB", "SMALL_GROUP", "MAX_ROWS")
    saved = [getattr(attention_flash, n) for n in names]
    if rows:
        attention_flash.MAX_ROWS = {d: min(r, rows) for d, r in saved[-1].items()}
        attention_flash.ONE_ROW_RB, attention_flash.SMALL_GROUP = rows, 0
    if chunks is not None:
        attention_flash.CLUSTER_MAX_KEYS = dict.fromkeys(attention_flash.HEAD_DIMS, 0)
    if chunks:
        attention_flash.TARGET_BLOCKS, attention_flash.MIN_CHUNK, attention_flash.MAX_CHUNKS = 1 << 20, 1, chunks
    try:
        yield
    finally:
        for n, v in zip(names, saved):
            setattr(attention_flash, n, v)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("mul_mat", "flash_attn_ext", "floor"))
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--cache", default=",".join(CACHE_TYPES), help="flash_attn_ext's K/V types (comma-separated)")
    p.add_argument("--label", default="", help="flash_attn_ext: only the shapes whose label starts so (gemma3, 1b, ..)")
    p.add_argument("--chunks", default="0", help="flash_attn_ext also with these chunk counts (comma-separated; 0: "
                   "as split chooses without clusters)")
    p.add_argument("--rows", default="", help="flash_attn_ext also with at most these pairs a block (comma-separated)")
    opts = p.parse_args(argv)
    backends = {"pdl": CUDABackend("cuda"), "no pdl": CUDABackend("cuda", pdl=False)}
    rng = np.random.default_rng(0)
    print(f"decode ops on {backends['pdl'].device.name}: us per op in a chain of R inside one CUDA graph")
    print("| op | shape | R | us (pdl) | us (no pdl) | GB/s read (pdl) |\n| --- | --- | --- | --- | --- | --- |")
    jobs = []
    if opts.only in (None, "floor"):
        jobs.append(("scale F32", "64 floats (launch floor)", (None, None), lambda b: floor_chain(b, rng)))
    if opts.only in (None, "mul_mat"):
        jobs += [(f"mul_mat {t}", f"{label} {K}x{M}", (None, None), lambda b, t=t, K=K, M=M: mat_vec_chain(b, t, K, M, rng))
                 for label, t, K, M in MAT_VECS]
    if opts.only in (None, "flash_attn_ext"):
        variants = [(None, None)] + [(int(c), None) for c in opts.chunks.split(",") if c] + [
            (None, int(r)) for r in opts.rows.split(",") if r]
        for (label, d, h, hk, nkv, used), cache, (chunks, rows) in itertools.product(
                ATTENTION, opts.cache.split(","), variants):
            if not label.startswith(opts.label):
                continue
            jobs.append((f"flash_attn_ext {cache}", f"{label} d{d} {h}/{hk} heads, {nkv} rows ({used} used)"
                         + ("" if chunks is None else f", {chunks} chunks" if chunks else ", no cluster")
                         + (f", <= {rows} pairs a block" if rows else ""), (chunks, rows),
                         lambda b, d=d, h=h, hk=hk, nkv=nkv, used=used, cache=cache:
                         attention_chain(b, d, h, hk, nkv, used, cache, rng)))
    for op, shape, variant, make in jobs:
        us = {}
        with split_as(*variant):
            for name, backend in backends.items():
                graph, n, per = make(backend)
                us[name] = timed(backend, graph, opts.replays) / n * 1e6
        print(f"| {op} | {shape} | {n} | {us['pdl']:.2f} | {us['no pdl']:.2f} | {per / us['pdl'] / 1e3:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
