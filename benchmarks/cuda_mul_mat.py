"""mul_mat GPU time on the CUDA backend (cuBLASLt): GFLOP/s of an M x N x K product in F32, TF32 and F16,
timed with CUDA events over repeated evaluations of a planned graph. Usage: python3 benchmarks/cuda_mul_mat.py [n]"""
from __future__ import annotations

import sys

import numpy as np

import ggpy
from ggpy.backends.cuda import CUDABackend
from ggpy.backends.cuda.device import Event


def planned_mul_mat(backend, type_, M: int, N: int, K: int):
    """A planned graph of one mul_mat (a ne = (K, M), b ne = (K, N) of type_) with random inputs."""
    ctx = ggpy.Context()
    a = ctx.new_tensor(type_, (K, M)).set_input()
    b = ctx.new_tensor(type_, (K, N)).set_input()
    graph = ggpy.Graph()
    graph.build_forward_expand(ggpy.mul_mat(a, b))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(0)
    for t in (a, b):
        t.set(rng.standard_normal(t.shape).astype(np.float32))
    return graph


def gflops(backend, type_, n: int, runs: int = 20) -> float:
    graph = planned_mul_mat(backend, type_, n, n, n)
    backend.compute(graph)                      # plan and warm up
    start, end = Event(), Event()
    start.record(backend.stream)
    for _ in range(runs):
        backend.compute_async(graph)
    end.record(backend.stream)
    return 2 * n ** 3 * runs / Event.elapsed(start, end) / 1e9


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    plain, tf32 = CUDABackend("cuda"), CUDABackend("cuda", allow_tf32=True)
    rates = [("F32", gflops(plain, ggpy.F32, n)), ("TF32", gflops(tf32, ggpy.F32, n)),
             ("F16", gflops(plain, ggpy.F16, n))]
    print(f"mul_mat {n}^3 on {plain.device.name}: " + ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in rates))


if __name__ == "__main__":
    main()
