"""Output files of the model commands: checked before any work starts, written atomically."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np


def output_problem(path, suffixes: tuple = ()) -> str | None:
    """Why `path` cannot be written as an output file (None when it can): a directory, a name not ending in one of
    `suffixes` (when given), a folder that does not exist, or no permission to write."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory; expected a file name"
    if suffixes and p.suffix.lower() not in suffixes:
        return f"{path}: expected a file name ending in {' or '.join(suffixes)}"
    folder = p.resolve().parent
    if not folder.is_dir():
        return f"{path}: its folder {folder} does not exist"
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{path} cannot be written (permission denied)"
    return None


def save_npy_atomic(path, array: np.ndarray):
    """np.save to exactly `path` (no suffix added): under a temporary name in the same folder, synced, then renamed,
    so a reader (or a kill) sees the whole file or none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, array)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
