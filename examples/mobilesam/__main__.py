"""MobileSAM on ggpy, from the repository root:

    python -m examples.mobilesam convert CHECKPOINT.pt -o model.gguf [--type f32|f16]
    python -m examples.mobilesam encode [-m model.gguf] [-i image.jpg] [-o embedding.npy] [-b cpu|cuda] [-t THREADS] [--bench N]
                                [--tf32] [--no-cuda-graphs]

Without -m, `encode` uses seeded random weights in the official architecture (converted once and cached),
so it runs out of the box; its embedding is then meaningless.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

import ggpy

from .preprocess import load_image

SAMPLE_IMAGE = Path(__file__).parent / "assets" / "picture2.jpg"
CACHE = Path.home() / ".cache" / "ggpy"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def random_model(path: Path | None = None) -> Path:
    """A GGUF of seeded random weights in the official architecture, written on first use (the cached file's
    name carries a hash of the code that makes it, so a changed converter writes a new one)."""
    if path is None:
        here = Path(__file__).parent
        code = b"".join((here / f).read_bytes() for f in ("architecture.py", "random_weights.py", "convert.py"))
        path = CACHE / f"mobilesam-random-seed0-f32-{hashlib.sha1(code).hexdigest()[:10]}.gguf"
    if not path.exists():
        from .convert import convert_state_dict
        from .random_weights import random_state_dict
        path.parent.mkdir(parents=True, exist_ok=True)
        convert_state_dict(random_state_dict(seed=0), path, type="f32", progress=False)
    return path


def cmd_convert(args):
    from .convert import convert
    convert(args.checkpoint, args.output, type=args.type)
    print(f"wrote {args.output}")


def cmd_encode(args):
    from .runner import ImageEncoder, flops_per_image
    model = args.model
    if model is None:
        print("no model file given (-m): using seeded random weights in the official MobileSAM architecture; "
              "the embedding is meaningless. Convert mobile_sam.pt with `python -m examples.mobilesam convert`.")
        model = random_model()
    image = load_image(args.image)
    t0 = time.perf_counter()
    enc = ImageEncoder(model, backend=args.backend, n_threads=args.threads, tf32=args.tf32,
                       cuda_graphs=not args.no_cuda_graphs)
    print(f"model {model}: {len(enc.graph.nodes)} nodes, planned in {(time.perf_counter() - t0) * 1e3:.0f} ms on "
          f"{enc.backend}")
    print(f"planned compute memory: {_mib(enc.planned_bytes)} (all intermediates without reuse: "
          f"{_mib(enc.intermediate_bytes)}); weights {_mib(enc.model.nbytes)}")
    t0 = time.perf_counter()
    embedding = enc.encode(image)
    print(f"image {args.image} ({image.shape[1]}x{image.shape[0]}): first evaluation {(time.perf_counter() - t0) * 1e3:.0f} ms"
          " (includes compiling kernels not yet cached)")
    np.save(args.output, embedding)
    print(f"embedding {embedding.shape} float32 -> {args.output}")
    by_stage, _ = enc.profile()
    total = sum(by_stage.values())
    d = 0 if args.backend == "cpu" else 2            # GPU stages take fractions of a millisecond
    print("time per stage: " + ", ".join(f"{k} {v * 1e3:.{d}f} ms" for k, v in by_stage.items())
          + f"; total {total * 1e3:.{d}f} ms")
    if args.bench:
        times = np.array(enc.bench(args.bench)) * 1e3
        gflops = flops_per_image(enc.hp) / 1e9
        print(f"{gflops:.1f} GFLOP per image: {gflops / np.median(times) * 1e3:.1f} GFLOP/s at the median")
        print(f"median_ms={np.median(times):.2f} min_ms={times.min():.2f} runs={args.bench}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m examples.mobilesam", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("convert", help="convert the official mobile_sam.pt into a GGUF")
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--type", choices=("f32", "f16"), default="f32")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("encode", help="compute the image embedding")
    p.add_argument("-m", "--model", help="GGUF made by `convert` (default: seeded random weights)")
    p.add_argument("-i", "--image", default=str(SAMPLE_IMAGE))
    p.add_argument("-o", "--output", default="embedding.npy")
    p.add_argument("-b", "--backend", default="cpu")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N evaluations after a warm-up")
    p.add_argument("--tf32", action="store_true", help="CUDA: let F32 matrix products round their inputs to TF32")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="CUDA: launch every kernel from Python instead of replaying one captured CUDA graph")
    p.set_defaults(func=cmd_encode)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ggpy.GGPYError, OSError, ValueError) as e:   # bad model file, image or path: a message, no traceback
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
