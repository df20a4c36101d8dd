"""GPU time of MobileSAM's dense conv_2d shapes on the CUDA backend, every implementation side by side (implicit GEMM,
im2col + cuBLASLt, direct, cuDNN where its Python frontend is installed; '-' where one does not take the shape), in
F32, TF32 and F16 (kernel and image F16), and the one CUDABackend(autotune=True) picks (measured afresh: a temporary
autotune cache). GPU ms per conv: the median of 5 profiles of its planned graph.

    python benchmarks/cuda_conv.py
"""
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ggpy  # noqa: E402
from ggpy.backends.cuda import cudnn_conv  # noqa: E402
from ggpy.backends.cuda.backend import CUDABackend  # noqa: E402
from ggpy.backends.cuda.registry import KERNELS  # noqa: E402

SHAPES = [  # label, Cin, Cout, input side, kernel side, stride, padding
    ("patch_embed 3->32 3x3 s2 @1024", 3, 32, 1024, 3, 2, 1),
    ("patch_embed 32->64 3x3 s2 @512", 32, 64, 512, 3, 2, 1),
    ("MBConv 1x1 64->256 @256", 64, 256, 256, 1, 1, 0),
    ("neck 1x1 320->256 @64", 320, 256, 64, 1, 1, 0),
    ("neck 3x3 256->256 @64", 256, 256, 64, 3, 1, 1),
]
IMPLS = KERNELS["conv_2d"].impls
PRECISIONS = [("F32", ggpy.F32, False), ("TF32", ggpy.F32, True), ("F16", ggpy.F16, False)]


def planned(backend, t, ci, co, hw, ks, s, p):
    """(graph, conv node) of one conv planned on backend, inputs filled."""
    ctx = ggpy.Context()
    k = ctx.new_tensor(t, (ks, ks, ci, co)).set_input()
    x = ctx.new_tensor(t, (hw, hw, ci, 1)).set_input()
    y = ggpy.conv_2d(k, x, s0=s, s1=s, p0=p, p1=p)
    g = ggpy.Graph()
    g.build_forward_expand(y)
    ggpy.GraphAllocator(backend).alloc_graph(g)
    rng = np.random.default_rng(0)
    for leaf in (k, x):
        leaf.set(rng.standard_normal(leaf.shape).astype(np.float32))
    return g, y


def gpu_ms(backend, g) -> float:
    backend.compute(g)
    return float(np.median([sum(t.seconds for t in backend.profile(g)) for _ in range(5)])) * 1e3


def main():
    os.environ["GGPY_AUTOTUNE_CACHE"] = tempfile.mkdtemp(prefix="ggpy-autotune-")
    cu = cudnn_conv.frontend()
    print(f"cuDNN: {f'frontend {cu.__version__}, library {cu.backend_version()}' if cu else 'not installed'}")
    print(f"{'shape':34} {'type':>4} " + " ".join(f"{i:>8}" for i in IMPLS) + "    tuned")
    for name, t, tf32 in PRECISIONS:
        for label, *shape in SHAPES:
            cells = []
            for impl in IMPLS:
                be = CUDABackend(allow_tf32=tf32, force={"conv_2d": impl})
                g, y = planned(be, t, *shape)
                ok = KERNELS["conv_2d"].accepts(y, impl, be)
                cells.append(f"{gpu_ms(be, g):8.3f}" if ok else f"{'-':>8}")
            tuned = CUDABackend(allow_tf32=tf32, autotune=True)
            g, y = planned(tuned, t, *shape)
            winner = tuned.impl_for(y)
            print(f"{label:34} {name:>4} " + " ".join(cells) + f"  {winner:>7} {gpu_ms(tuned, g):.3f}", flush=True)
            why = cudnn_conv.refusal(y)
            if why and cu:
                print(f"    cudnn refused: {why[:300]}")


if __name__ == "__main__":
    main()
