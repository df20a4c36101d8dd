"""What the `ggpy-sam` subcommands share: the sample image, argparse types, the --dtype option, and the model file
or (without -m) the seeded random-weights model."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from ..outputs import output_problem
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


def non_negative(text: str) -> int:
    """argparse type of --bench: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


class UsageError(ValueError):
    """A bad argument found after parsing (an output path that cannot be written): exit status 2, as argparse."""


IMAGE_OUTPUT = "image"
"""check_output's `suffixes` for a picture: any file name Pillow can save (.png, .jpg, ...)."""


def check_output(option: str, path, suffixes=()):
    """UsageError unless `path` can be written as the output `option`: a file name ending in one of `suffixes` (or,
    IMAGE_OUTPUT, one Pillow saves), not a directory, in an existing folder this process may write into."""
    if suffixes == IMAGE_OUTPUT:
        if not Path(path).is_dir() and Path(path).suffix.lower() not in _saved_image_suffixes():
            raise UsageError(f"{option} {path}: expected an image file name (.png, .jpg, ...)")
        suffixes = ()
    problem = output_problem(path, tuple(suffixes))
    if problem:
        raise UsageError(f"{option} {problem}")


def _saved_image_suffixes() -> set:
    return {ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.SAVE}


def check_finite(array, model, what: str):
    """`array`, or ValueError naming the model file when `array` (an embedding, scores) holds NaN or infinity: weights that
    load but compute garbage, refused instead of written."""
    if not np.isfinite(array).all():
        raise ValueError(f"{what} computed with {model} is not finite ({int((~np.isfinite(array)).sum())} NaN or "
                         "infinite values): its weights are corrupt; expected a GGUF written by `ggpy-sam convert`")
    return array


def add_dtype_argument(p):
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32",
                   help="precision of the encoder's activations (default f32; tf32: F32 with TF32 GEMMs on CUDA)")


def checked_model(model, meaningless: str) -> tuple:
    """(model_or_random's path, its metadata) once model_check has passed the file (before any tensor is loaded)."""
    from .model_check import check_model
    path = model_or_random(model, meaningless)
    return path, check_model(path)


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
