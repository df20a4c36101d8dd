"""A graph planned on a Scheduler over the model's backends: what the decoder graphs and the mask statistics share
(until a graph runner object takes its place)."""
from __future__ import annotations

import ggpy


def planned_scheduler(graph, backends) -> ggpy.Scheduler:
    """A Scheduler over `backends` (in order of preference) with `graph` split and planned on it."""
    sched = ggpy.Scheduler(backends)
    sched.alloc_graph(graph)
    return sched
