"""Graphs split across backends: the Scheduler (ggml_backend_sched)."""
from .scheduler import Scheduler, Split

__all__ = ["Scheduler", "Split"]
