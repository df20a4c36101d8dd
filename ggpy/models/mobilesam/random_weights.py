"""Seeded random weights in the official MobileSAM state-dict layout, made without torch.

Every tensor gets a value that keeps activations O(1) through the network and exercises every term of
the computation: BatchNorm statistics and affines, LayerNorm affines and attention biases are random, not
the builder's (0, 1) / zero defaults that would hide bugs. `random_model()` is them converted to a GGUF, cached:
what the commands run without -m.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .architecture import official_shapes
from .convert import convert_state_dict

CACHE = Path.home() / ".cache" / "ggpy"


def _value(rng: np.random.Generator, key: str, shape: tuple) -> np.ndarray:
    last = key.rsplit(".", 1)[-1]
    if last == "num_batches_tracked":
        return np.array(0, dtype=np.int64)
    if last == "running_mean":
        return rng.normal(0.0, 0.1, shape)
    if last == "running_var":
        return rng.uniform(0.5, 2.0, shape)
    if last == "attention_biases":
        return rng.normal(0.0, 1.0, shape)
    if len(shape) == 1 and last == "weight":          # BatchNorm / LayerNorm scale
        return rng.uniform(0.5, 1.5, shape)
    if last == "bias":
        return rng.normal(0.0, 0.1, shape)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return rng.normal(0.0, 1.0 / np.sqrt(max(fan_in, 1)), shape)


def random_state_dict(seed: int = 0) -> dict:
    """{key: float32 array (int64 for num_batches_tracked)} for every key of the official checkpoint."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in official_shapes().items():
        v = _value(rng, key, shape)
        out[key] = v if v.dtype == np.int64 else v.astype(np.float32)
    return out


def random_model(path: Path | None = None) -> Path:
    """A GGUF of seeded random weights in the official architecture, written on first use (the cached file's
    name carries a hash of the code that makes it, so a changed converter writes a new one)."""
    if path is None:
        here = Path(__file__).parent
        code = b"".join((here / f).read_bytes() for f in ("architecture.py", "random_weights.py", "convert.py"))
        path = CACHE / f"mobilesam-random-seed0-f32-{hashlib.sha1(code).hexdigest()[:10]}.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        convert_state_dict(random_state_dict(seed=0), path, type="f32", progress=False)
    return path
