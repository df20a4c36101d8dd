"""Run one op case on a backend and compare it with its float64 numpy reference (ggml's test-backend-ops).

A case builds a small graph whose last node is the op under test. Its leafs get fresh random values,
the graph is planned without memory reuse and with guard bytes around every tensor, evaluated, and the
op's output is compared by normalised mean squared error with the reference computed from the very
values the op read (its sources, read back after the run).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

from ..alloc import GraphAllocator
from ..graph import Context, Graph
from ..types import F16, I32
from .references import REFERENCES

GUARD_BYTES = 64


@dataclass
class OpCase:
    """One test: `build(ctx)` returns the node under test; `fill(rng, leaf)` may give a leaf's values."""

    op: str
    params: str
    build: Callable
    fill: Callable | None = None
    max_nmse: float = 1e-7
    flops: Callable | None = None          # flops(node) for GFLOP/s in perf mode
    tags: tuple = field(default_factory=tuple)

    @property
    def id(self) -> str:
        return f"{self.op}({self.params})"


@dataclass
class CaseResult:
    case: OpCase
    ok: bool
    nmse: float
    message: str = ""
    us_per_run: float = 0.0
    rate: str = ""


def nmse(out: np.ndarray, ref: np.ndarray) -> float:
    """sum((out - ref)^2) / sum(ref^2), ggml's normalised mean squared error (1 when ref is all zero)."""
    out = out.astype(np.float64)
    num = np.sum((out - ref) ** 2)
    den = np.sum(ref ** 2)
    if den == 0:
        return float(num)
    return float(num / den)


def default_fill(rng: np.random.Generator, t) -> np.ndarray:
    """Uniform values in [-1, 1) for float tensors (never zeros), small indices for I32."""
    shape = tuple(reversed(t.ne))
    if t.type == I32:
        return rng.integers(0, 4, size=shape).astype(np.int32)
    return rng.uniform(-1.0, 1.0, size=shape)


def _build(case: OpCase, backend, seed: int):
    ctx = Context()
    out = case.build(ctx)
    for s in out.src:
        if s is not None:
            s.set_output()      # keep every source readable after the run
    graph = Graph()
    graph.build_forward_expand(out)
    alloc = GraphAllocator(backend, reuse=False, guard_bytes=GUARD_BYTES, check=True)
    alloc.alloc_graph(graph)
    rng = np.random.default_rng(seed)
    for leaf in graph.leafs:
        values = case.fill(rng, leaf) if case.fill is not None else None
        leaf.set(default_fill(rng, leaf) if values is None else values)
    return graph, alloc, out


def compare(case: OpCase, out_node, out: np.ndarray, srcs: list) -> tuple[bool, float, str]:
    ref = REFERENCES[out_node.op](out_node, srcs)
    ref = np.broadcast_to(np.asarray(ref, dtype=np.float64), out.shape)
    if out_node.type == I32:
        bad = int(np.sum(out != ref))
        return bad == 0, float(bad), "" if bad == 0 else f"{bad} of {out.size} integers differ"
    out64 = out.astype(np.float64)
    special = ~np.isfinite(ref)
    if np.any(special):
        same = (out64[special] == ref[special]) | (np.isnan(out64[special]) & np.isnan(ref[special]))
        if not np.all(same):
            return False, float("nan"), f"{int(np.sum(~same))} inf/nan values differ from the reference"
    if not np.all(np.isfinite(out64[~special])):
        return False, float("nan"), "output has inf/nan where the reference is finite"
    err = nmse(out64[~special], ref[~special])
    limit = max(case.max_nmse, 5e-6) if out_node.type == F16 else case.max_nmse
    ok = err <= limit
    return ok, err, "" if ok else f"nmse {err:.3e} > {limit:.1e}"


def refusal(case: OpCase, backend) -> str | None:
    """Why `backend` cannot run the case (its reason for refusing one of the case's nodes), or None."""
    graph = Graph()
    graph.build_forward_expand(case.build(Context()))
    for node in graph.nodes:
        if not backend.supports_op(node):
            return f"{backend.name} refuses {node.op}: {backend.refusal(node)}"
    return None


def run_case(case: OpCase, backend, seed: int = 0) -> CaseResult:
    """Build, evaluate and check one case on `backend`."""
    graph, alloc, out_node = _build(case, backend, seed)
    backend.compute(graph)
    backend.synchronize()
    alloc.check_guards(graph)
    srcs = [s.numpy().reshape(tuple(reversed(s.ne))).astype(np.float64) if s is not None else None
            for s in out_node.src]
    out = out_node.numpy().reshape(tuple(reversed(out_node.ne)))
    ok, err, msg = compare(case, out_node, out, srcs)
    return CaseResult(case, ok, err, msg)


def perf_case(case: OpCase, backend, min_seconds: float = 0.5, max_runs: int = 1000) -> CaseResult:
    """Time the case's graph (µs per evaluation) and report GFLOP/s or GB/s."""
    graph, _, out_node = _build(case, backend, 0)
    backend.compute(graph)
    backend.synchronize()
    runs = 0
    t0 = time.perf_counter()
    while runs < max_runs and (runs < 3 or time.perf_counter() - t0 < min_seconds):
        backend.compute(graph)
        runs += 1
    backend.synchronize()
    us = (time.perf_counter() - t0) / runs * 1e6
    if case.flops is not None:
        rate = f"{case.flops(out_node) / us / 1e3:.2f} GFLOP/s"
    else:
        nbytes = out_node.nbytes + sum(s.nbytes for s in out_node.src if s is not None)
        rate = f"{nbytes / us / 1e3:.2f} GB/s"
    return CaseResult(case, True, 0.0, "", us, rate)
