"""The CPU kernels' numba disk cache, in a folder keyed by the sources of every module the kernels reach.

numba keys a cache entry by the kernel's own file only: after an edit of a helper it calls or a constant it imports
from another module, it would serve the old code. So the cache lives in <root>/<hash of SOURCES' files>, root being
$GGPY_NUMBA_CACHE or ~/.cache/ggpy/numba: any edit of a kernel module or of what it imports starts an empty folder.
numba picks a function's cache folder (numba.config.CACHE_DIR) when its cache=True dispatcher is made, i.e. when
the kernel modules are imported, which `keyed()` surrounds. A cache folder the user chose (NUMBA_CACHE_DIR, or
numba.config.CACHE_DIR set before) is left as it is. Other keys' folders are never deleted here: another install or
checkout sharing ~/.cache may be using them (delete the root to reclaim the space).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import numba

PACKAGE = Path(__file__).resolve().parents[2]
"""The ggpy package's folder."""
SOURCES = ("backends/cpu", "backends/kernel.py", "errors.py", "ops/layout.py", "ops/rope.py", "optable.py",
           "types.py")
"""The CPU backend's package and the modules outside it that its files import, relative to PACKAGE."""


def sources() -> list[Path]:
    files = []
    for name in SOURCES:
        path = PACKAGE / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def key() -> str:
    """A hash of the names and contents of sources() (a few ms)."""
    digest = hashlib.sha1()
    for path in sources():
        digest.update(f"{path.relative_to(PACKAGE)}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def folder() -> Path:
    root = os.environ.get("GGPY_NUMBA_CACHE") or Path.home() / ".cache" / "ggpy" / "numba"
    return Path(root) / key()


@contextlib.contextmanager
def keyed():
    """numba.config.CACHE_DIR is folder() inside the block (where the kernel modules are imported), unless the user
    chose one; restored afterwards (the dispatchers made inside keep their folder)."""
    saved = numba.config.CACHE_DIR
    if not saved:
        numba.config.CACHE_DIR = str(folder())
    try:
        yield
    finally:
        numba.config.CACHE_DIR = saved
