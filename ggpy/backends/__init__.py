"""Backends: the interface (base) and one package per device."""
from __future__ import annotations

import inspect

from ..errors import OptionError, UnsupportedOpError


def make_backend(name: str, n_threads: int | None = None, **options):
    """A backend by name with its constructor's options: 'cpu' (CPUBackend: n_threads, force, scratch_budget, fuse,
    autotune), 'cuda' or 'cuda:N' (CUDABackend: allow_tf32, graphs, fuse, force, autotune, pdl; the CUDA modules are
    imported only then). n_threads sizes the CPU's workers and is ignored by the other backends, so that a runner can
    pass its --threads whatever the backend; an option the backend does not take is an OptionError naming the ones it
    does."""
    if name == "cpu":
        from .cpu import CPUBackend
        return CPUBackend(**_checked(CPUBackend, name, dict(options, n_threads=n_threads)))
    if name == "cuda" or name.startswith("cuda:"):
        from .cuda.backend import CUDABackend
        return CUDABackend(name, **_checked(CUDABackend, name, options))
    raise UnsupportedOpError(f"unknown backend {name!r}; expected 'cpu', 'cuda' or 'cuda:N'")


def _checked(cls, name: str, options: dict) -> dict:
    """`options` when `cls`'s constructor takes each of them (keyword options, not its device or buffer type)."""
    params = inspect.signature(cls.__init__).parameters
    accepted = [p for p in params if p not in ("self", "device", "buffer_type")]
    unknown = [k for k in options if k not in accepted]
    if unknown:
        raise OptionError(f"backend {name!r} ({cls.__name__}) takes no option {', '.join(map(repr, unknown))}; its "
                        f"options: {', '.join(accepted)}")
    return options
