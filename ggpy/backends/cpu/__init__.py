"""The numba CPU backend."""
from .backend import CPUBackend
from .buffer import HostBuffer, HostBufferType

__all__ = ["CPUBackend", "HostBuffer", "HostBufferType"]
