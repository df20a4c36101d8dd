"""MobileSAM's window attention alone on CUDA (TinyViT stages 1-3 at batch 8, F16 q, k, v from one qkv tensor, the
F32 per-head bias table, the result cast to F16 as the encoder's graph has it): µs per call of ggpy's fused kernel
(win_attn_tc, its own time by profile()) against PyTorch's scaled_dot_product_attention on the same tensors (an
F16 bias; CUDA events over repeated calls), with the bandwidth of the minimum traffic (qkv read once, the result
written once) against the GPU's.

    python3 benchmarks/cuda_win_attn.py [BATCH]
"""
from __future__ import annotations

import sys

import numpy as np
import torch

import ggpy
from ggpy.backends.cuda import CUDABackend

# stage: (channels, heads, window, windows per image) of MobileSAM's TinyViT at 1024x1024 (padded grids 133, 70, 70)
STAGES = {"stage1 (C128, w7)": (128, 4, 7, 19 * 19), "stage2 (C160, w14)": (160, 5, 14, 5 * 5),
          "stage3 (C320, w7)": (320, 10, 7, 10 * 10)}


def ggpy_us(backend, c, heads, window, nw, qkv_v, ab_v) -> tuple:
    """(GPU µs of the fused attention (median of 20 profiled evaluations), its kernel names, the result)."""
    hd, n = c // heads, window * window
    ctx = ggpy.Context()
    qkv = ctx.new_tensor(ggpy.F16, (3 * c, n, nw)).set_input()
    ab = ctx.new_tensor(ggpy.F32, (n, n, heads)).set_input()

    def part(i):
        return ggpy.view_4d(qkv, hd, heads, n, nw, 3 * hd * 2, qkv.nb[1], qkv.nb[2], i * hd * 2)
    q, k, v_t = ggpy.permute(part(0), 0, 2, 1, 3), ggpy.permute(part(1), 0, 2, 1, 3), ggpy.permute(part(2), 1, 2, 0, 3)
    out = ggpy.cast(ggpy.permute(ggpy.mul_mat(v_t, ggpy.soft_max_ext(ggpy.mul_mat(k, q), ab, hd ** -0.5)), 0, 2, 1, 3),
                    ggpy.F16)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    qkv.set(qkv_v)
    ab.set(ab_v)
    backend.compute(graph)
    times = [sum(t.seconds for t in backend.profile(graph)) for _ in range(20)]
    names = {t.name for t in backend.profile(graph)}
    return float(np.median(times)) * 1e6, ", ".join(sorted(names)), out.numpy()


def torch_us(c, heads, window, nw, qkv_v, ab_v, runs: int = 50) -> tuple:
    """(µs per call of scaled_dot_product_attention + the heads' transpose, the result)."""
    hd, n = c // heads, window * window
    qkv = torch.from_numpy(qkv_v).cuda().view(nw, n, heads, 3, hd)          # TinyViT's per-head q, k, v
    q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))         # (nW, heads, N, hd) views
    ab = torch.from_numpy(ab_v).cuda().half()                              # (heads, N, N)

    def fn():
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ab)
        return o.transpose(1, 2).reshape(nw, n, c)
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / runs * 1e3, fn().float().cpu().numpy()


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    backend = CUDABackend("cuda")
    hbm = 4.8e12 if "H200" in torch.cuda.get_device_name() else 3.35e12
    print(f"## window attention, batch {batch}, F16, {torch.cuda.get_device_name()}\n")
    print("| stage | windows x heads | ggpy µs | GB/s (of HBM) | SDPA µs | SDPA / ggpy | max |diff| | ggpy kernel |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rng = np.random.default_rng(0)
    for name, (c, heads, window, per_image) in STAGES.items():
        nw, n = per_image * batch, window * window
        qkv_v = rng.standard_normal((nw, n, 3 * c)).astype(np.float16)
        ab_v = rng.uniform(-2, 2, (heads, n, n)).astype(np.float32)
        g_us, kernel, g_out = ggpy_us(backend, c, heads, window, nw, qkv_v, ab_v)
        t_us, t_out = torch_us(c, heads, window, nw, qkv_v, ab_v)
        moved = qkv_v.nbytes * 4 / 3
        diff = float(np.abs(g_out.astype(np.float32).reshape(t_out.shape) - t_out).max())
        print(f"| {name} | {nw} x {heads} | {g_us:.1f} | {moved / g_us / 1e3:.0f} ({moved / g_us * 1e6 / hbm:.0%}) | "
              f"{t_us:.1f} | {t_us / g_us:.2f} | {diff:.1e} | {kernel} |", flush=True)


if __name__ == "__main__":
    main()
