"""The numba CPU backend."""
from . import numba_cache

with numba_cache.keyed():             # the kernel modules, imported by .backend, cache in a folder keyed by sources
    from .backend import CPUBackend
    from .buffer import HostBuffer, HostBufferType

__all__ = ["CPUBackend", "HostBuffer", "HostBufferType"]
