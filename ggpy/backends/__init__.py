"""Backends: the interface (base) and one package per device."""
from __future__ import annotations

from ..errors import UnsupportedOpError


def make_backend(name: str, n_threads: int | None = None):
    """A backend by name: 'cpu'."""
    if name == "cpu":
        from .cpu import CPUBackend
        return CPUBackend(n_threads=n_threads)
    raise UnsupportedOpError(f"unknown backend {name!r}; expected 'cpu'")
