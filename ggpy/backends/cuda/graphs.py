"""CUDA graphs: a planned graph's launches captured once (cuStreamBeginCapture .. cuStreamEndCapture),
instantiated, and replayed with one cuGraphLaunch per evaluation.

Every step of a plan launches on the backend's stream with arguments (device addresses, shapes) fixed per
plan, and inputs are written into the same addresses before each evaluation, so one capture stays valid
for as long as the plan does. cuBLASLt GEMMs are captured too: their workspace is part of the node's temp
block, never allocated during the call.
"""
from __future__ import annotations

import logging

from ...errors import CudaError
from .driver import check, driver, error_name

log = logging.getLogger("ggpy.cuda")


class CapturedGraph:
    """The instantiated CUDA graph of `steps` (callables taking the stream), captured on `stream`.
    Raises CudaError (the stream left out of capture mode) when a step cannot be captured."""

    def __init__(self, steps: list, stream):
        self.stream = stream
        self.graph = self.exec = None
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(driver.cuStreamBeginCapture(stream.handle, mode), "cuStreamBeginCapture")
        try:
            for run in steps:
                run(stream)
        except Exception as e:  # noqa: BLE001 - re-raised as CudaError once the capture is ended
            res = driver.cuStreamEndCapture(stream.handle)      # leave capture mode whatever happened
            if res[0] == driver.CUresult.CUDA_SUCCESS and res[1] is not None:
                driver.cuGraphDestroy(res[1])
            name = getattr(run, "name", type(run).__name__)
            raise CudaError(f"step '{name}' of node '{getattr(getattr(run, 'node', None), 'name', '?')}' "
                            f"could not be captured: {e}") from None
        self.graph = check(driver.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
        self.exec = check(driver.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
        self.steps = len(steps)
        try:
            self.nodes = int(check(driver.cuGraphGetNodes(self.graph, 0), "cuGraphGetNodes")[1])
        except Exception:  # noqa: BLE001 - only informative
            self.nodes = None

    def launch(self):
        check(driver.cuGraphLaunch(self.exec, self.stream.handle), "cuGraphLaunch")

    def __del__(self):
        if driver is None:
            return
        if getattr(self, "exec", None) is not None:
            driver.cuGraphExecDestroy(self.exec)
        if getattr(self, "graph", None) is not None:
            driver.cuGraphDestroy(self.graph)

    def __repr__(self) -> str:
        return f"CapturedGraph({self.steps} steps, {self.nodes} graph nodes)"


_LOGGED: set = set()


def capture(steps: list, stream) -> CapturedGraph | None:
    """A CapturedGraph of `steps`, or None (the reason logged once per distinct reason) when capture fails;
    the caller then launches the steps one by one."""
    if not steps:
        return None
    try:
        return CapturedGraph(steps, stream)
    except CudaError as e:
        reason = str(e)
    except Exception as e:  # noqa: BLE001 - e.g. a binding without graph support: fall back, never fail
        reason = f"{type(e).__name__}: {e}"
    # a failed capture must not leave the stream capturing (it would reject every later launch)
    try:
        _, status = driver.cuStreamIsCapturing(stream.handle)
        if status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            res = driver.cuStreamEndCapture(stream.handle)
            if res[0] == driver.CUresult.CUDA_SUCCESS and res[1] is not None:
                driver.cuGraphDestroy(res[1])
    except Exception as e:  # noqa: BLE001
        reason += f" (and the stream's capture state could not be read: {error_name(e)})"
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        log.warning("cuda: CUDA graph capture failed, launching kernels one by one: %s", reason)
    return None
