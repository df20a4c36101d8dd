"""flash_attn_ext alone for a prompt chunk over an F16 KV cache on CUDA (issue 28's pp512 at depth 4096), laid out as
llama's graph has it (cache views, q permuted, an F32 causal mask): µs per evaluation of the tensor-core kernel
fa_mma_k (+ its merge of key chunks) against mul_mat + soft_max_ext + mul_mat + cont (llama's path without flash
attention, cuBLAS), for SmolLM2's shape (D 64, 9 / 3 heads) and a 1B's (D 128, 32 / 8 heads); CUDA events over
repeated (captured) evaluations, the kernels' own times by profile(). tokens/s = n_q / the op's time (one block's
attention alone). Measured on an H200 (n_q 512, n_kv 4608): SmolLM2 116 us (4.4M tok/s) vs 510 us by mul_mat and 830 us
by the former fa_tc_k (a warp per 16 query rows of one head, no key split); 1B 514 us vs 2290 us and 1700 us.
Usage: python3 benchmarks/cuda_fa_prompt.py [n_q n_kv]"""
from __future__ import annotations

import sys

import numpy as np

import ggpy
from ggpy.backends.cuda import CUDABackend
from ggpy.backends.cuda.device import Event

SHAPES = {"SmolLM2 (D64, 9/3)": (64, 9, 3), "1B (D128, 32/8)": (128, 32, 8)}


def build(backend, d, h, hk, n, n_kv, flash: bool):
    """(graph, out) of one block's attention with random inputs: query i at position n_kv - n + i."""
    ctx = ggpy.Context()
    caches = [ctx.new_tensor(ggpy.F16, (d * hk, n_kv)).set_input() for _ in range(2)]
    qin = ctx.new_tensor(ggpy.F32, (d, h, n)).set_input()
    mask = ctx.new_tensor(ggpy.F32, (n_kv, n)).set_input()
    k, v = (ggpy.view_3d(c, d, n_kv, hk, c.nb[1], d * 2) for c in caches)
    q = ggpy.permute(qin, 0, 2, 1, 3)
    if flash:
        out = ggpy.flash_attn_ext(q, k, v, mask, d ** -0.5)
    else:
        kq = ggpy.soft_max_ext(ggpy.mul_mat(k, q), mask, d ** -0.5)
        out = ggpy.cont(ggpy.permute(ggpy.mul_mat(ggpy.permute(v, 1, 0, 2, 3), kq), 0, 2, 1, 3))
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(0)
    for c in caches:
        c.set(rng.uniform(-1, 1, c.shape).astype(np.float16))
    qin.set(rng.uniform(-1, 1, qin.shape).astype(np.float32))
    i, j = np.indices((n, n_kv))
    mask.set(np.where(j <= n_kv - n + i, 0.0, -np.inf).astype(np.float32))
    return graph, out


def time_us(backend, graph, runs: int = 30) -> float:
    backend.compute(graph)
    backend.compute(graph)                  # captured from the second evaluation on
    start, end = Event(), Event()
    start.record(backend.stream)
    for _ in range(runs):
        backend.compute_async(graph)
    end.record(backend.stream)
    backend.synchronize()
    return Event.elapsed(start, end) / runs * 1e6


def main():
    n, n_kv = (int(x) for x in sys.argv[1:3]) if len(sys.argv) > 2 else (512, 4608)
    backend = CUDABackend("cuda")
    print(f"flash_attn_ext, n_q {n}, n_kv {n_kv}, F16 cache, on {backend.device.name}")
    for label, (d, h, hk) in SHAPES.items():
        ref_graph, ref = build(backend, d, h, hk, n, n_kv, False)
        graph, out = build(backend, d, h, hk, n, n_kv, True)
        rows = [("mul_mat + soft_max_ext + mul_mat + cont", ref_graph), ("flash_attn_ext", graph)]
        for name, g in rows:
            us = time_us(backend, g)
            kernels = ", ".join(f"{t.name} {t.seconds * 1e6:.1f} us" for t in backend.profile(g))
            print(f"{label} {name}: {us:.1f} us, {n / us * 1e6:,.0f} tok/s ({kernels})")
        print(f"  max |flash - mul_mat| {np.abs(out.numpy().reshape(-1) - ref.numpy().reshape(-1)).max():.1e}")


if __name__ == "__main__":
    main()
