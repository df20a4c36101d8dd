"""cuBLASLt's first heuristic answer vs the algorithm CUDABackend(autotune=True) measured, for MobileSAM-like mul_mat
shapes (M x N x K, D = A B): the GEMM's median GPU microseconds over repeated profiles (CUDA events around it in a
captured graph), and the seconds the tuning took (its candidates timed once per shape; the disk cache answers later).
Usage: python3 benchmarks/cuda_autotune.py"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import ggpy
from ggpy.backends.cuda import CUDABackend, autotune

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mul_mat import planned_mul_mat  # noqa: E402 - a script beside this one

SHAPES = [(160, 65536, 64), (256, 65536, 64), (640, 4096, 160), (160, 4096, 640), (480, 4096, 160),
          (320, 16384, 640), (1280, 1024, 320)]


def timed(backend, type_, M: int, N: int, K: int, runs: int = 30) -> tuple[float, float]:
    """(the GEMM's median GPU microseconds over `runs` profiles, seconds to build the program: the tuning when it
    measures)."""
    graph = planned_mul_mat(backend, type_, M, N, K)
    t0 = time.perf_counter()
    backend.program(graph)
    setup = time.perf_counter() - t0
    backend.compute(graph)                      # warm up
    return float(np.median([backend.profile(graph)[-1].seconds for _ in range(runs)])) * 1e6, setup


def main():
    rows = []
    for tf32 in (False, True):
        plain, tuned = CUDABackend("cuda", allow_tf32=tf32), CUDABackend("cuda", allow_tf32=tf32, autotune=True)
        for type_ in (ggpy.F32,) if tf32 else (ggpy.F32, ggpy.F16):
            for M, N, K in SHAPES:
                first, _ = timed(plain, type_, M, N, K)
                measured, known = autotune.WINNERS.stats["measured"], set(autotune.WINNERS.memory)
                best, setup = timed(tuned, type_, M, N, K)
                times = next(v[1] for k, v in autotune.WINNERS.memory.items() if k not in known and k[0] == "gemm")
                ran = {i: t for i, t in times.items() if t is not None}
                rows.append((f"{M}x{N}x{K}", "TF32" if tf32 else type_.name, first, best,
                             f"#{min(ran, key=ran.get)} of {len(times)}", setup, autotune.WINNERS.stats["measured"] > measured))
    print(f"mul_mat on {plain.device.name}: cuBLASLt's first heuristic algorithm vs the measured one (GPU us per "
          "product; pick: the winner's place in the heuristic's list, #0 its first)")
    print(f"{'M x N x K':>16} {'type':>5} {'heuristic':>10} {'tuned':>10} {'speedup':>8} {'pick':>8} {'tuning s':>9}")
    for shape, name, first, best, pick, setup, fresh in rows:
        print(f"{shape:>16} {name:>5} {first:10.1f} {best:10.1f} {first / best:7.2f}x {pick:>8} "
              f"{setup:8.2f}{'' if fresh else ' (cached)'}")


if __name__ == "__main__":
    main()
