"""A CPU backend that stages and queues as the CUDA backend does, for the token loop's tests (runner.TokenStep) on a
machine without a GPU: `stage` keeps a planned graph's inputs and outputs in host arrays (GraphRunner.staged hands
them out) and `compute_async` only queues the graph; `synchronize` (or the next compute) copies the staged inputs in,
computes and copies the staged outputs out, as a CUDA graph's uploads, kernels and downloads do."""
from __future__ import annotations

import numpy as np

from ggpy.backends.cpu.backend import CPUBackend


class HostStaging:
    """Host arrays (numpy, full reversed(ne)) standing in for a plan's `inputs` and `outputs` (cuda/staging.py's
    interface: has, write, view, read)."""

    def __init__(self, inputs: list, outputs: list):
        self.inputs, self.outputs = list(inputs), list(outputs)
        self._views = {id(t): np.zeros(tuple(reversed(t.ne)), t.type.dtype) for t in self.inputs + self.outputs}

    def has(self, tensor) -> bool:
        return id(tensor) in self._views

    def write(self, tensor, array):
        np.copyto(self._views[id(tensor)], tensor.checked_values(array), casting="unsafe")

    def view(self, tensor) -> np.ndarray:
        return self._views[id(tensor)]

    def read(self, tensor) -> np.ndarray:
        return self._views[id(tensor)].reshape(tensor.shape).copy()


class StagedCPU(CPUBackend):
    """CPUBackend with HostStaging and a queue of one graph (`queued`: how many computes were queued)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending, self.queued = None, 0

    def stage(self, graph, inputs, outputs) -> HostStaging:
        return self.cached(graph, "staging", lambda g: HostStaging(inputs, outputs), self.plan_stamp(graph))

    def compute_async(self, graph):
        self.synchronize()
        self._pending, self.queued = graph, self.queued + 1

    def synchronize(self):
        graph, self._pending = self._pending, None
        if graph is None:
            return
        staging = graph.backend_cache[(self, "staging")][1]
        for t in staging.inputs:
            t.set(staging.view(t))
        self.compute(graph)
        for t in staging.outputs:
            staging.view(t)[...] = t.numpy().reshape(staging.view(t).shape)
