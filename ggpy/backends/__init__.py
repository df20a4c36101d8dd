"""Backends: the interface (base) and one package per device."""
from __future__ import annotations

from ..errors import UnsupportedOpError


def make_backend(name: str, n_threads: int | None = None):
    """A backend by name: 'cpu', 'cuda' or 'cuda:N' (the CUDA modules are imported only then)."""
    if name == "cpu":
        from .cpu import CPUBackend
        return CPUBackend(n_threads=n_threads)
    if name == "cuda" or name.startswith("cuda:"):
        from .cuda.backend import CUDABackend
        return CUDABackend(name)
    raise UnsupportedOpError(f"unknown backend {name!r}; expected 'cpu', 'cuda' or 'cuda:N'")
