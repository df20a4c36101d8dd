"""GPU time of MobileSAM's dense conv_2d shapes on the CUDA backend: implicit GEMM vs im2col + cuBLASLt.

    python benchmarks/cuda_conv.py
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ggpy  # noqa: E402
from ggpy.backends.cuda.backend import CUDABackend  # noqa: E402

SHAPES = [("patch_embed 3->32 s2 @1024", 3, 32, 1024, 2), ("patch_embed 32->64 s2 @512", 32, 64, 512, 2),
          ("neck 3x3 256->256 @64", 256, 256, 64, 1)]
for tf32 in (False, True):
    for label, ci, co, hw, s in SHAPES:
        row = []
        for mode in ("implicit", "im2col"):
            be = CUDABackend(allow_tf32=tf32, force={"conv_2d": mode})
            ctx = ggpy.Context()
            k = ctx.new_tensor(ggpy.F32, (3, 3, ci, co)).set_input()
            x = ctx.new_tensor(ggpy.F32, (hw, hw, ci, 1)).set_input()
            y = ggpy.conv_2d(k, x, s0=s, s1=s, p0=1, p1=1)
            g = ggpy.Graph()
            g.build_forward_expand(y)
            ggpy.GraphAllocator(be).alloc_graph(g)
            rng = np.random.default_rng(0)
            for t in (k, x):
                t.set(rng.standard_normal(t.shape).astype(np.float32))
            be.compute(g)
            ts = [sum(t for _, _, t in be.profile(g)) for _ in range(5)]
            row.append(f"{mode} {np.median(ts) * 1e3:.3f} ms")
        print(f"{'TF32' if tf32 else 'F32 '} {label}: " + ", ".join(row), flush=True)
