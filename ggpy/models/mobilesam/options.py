"""What the `ggpy-sam` subcommands share: the sample image, argparse types, the --dtype option, and the model file
or (without -m) the seeded random-weights model."""
from __future__ import annotations

import argparse
from pathlib import Path

from .random_weights import random_model
from .runner import DTYPES

SAMPLE_IMAGE = Path(__file__).parent / "assets" / "picture2.jpg"


def positive(text: str) -> int:
    """argparse type of --batch and --threads: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of images, got {text!r}")
    return value


def add_dtype_argument(p):
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                   help="precision of the encoder's activations (default f32; tf32: F32 with TF32 GEMMs on CUDA)")


def model_or_random(model, meaningless: str):
    """`model`, or (when it is None) the random-weights model, said so with what it makes `meaningless`."""
    if model is not None:
        return model
    print(f"no model file given (-m): using seeded random weights in the official MobileSAM architecture; "
          f"{meaningless}. Convert mobile_sam.pt with `ggpy-sam convert`.")
    return random_model()


def note_cpu_half(args):
    """Say that half-precision activations are a memory saving on the CPU, not a speed-up."""
    if args.backend == "cpu" and args.dtype in ("f16", "bf16"):
        print(f"note: the CPU has no {args.dtype} arithmetic: activations are stored in {args.dtype} (less memory) "
              "but converted for every op, so this runs slower than --dtype f32 there")
