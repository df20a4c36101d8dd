"""Run one op case on a backend and compare it with its float64 numpy reference (ggml's test-backend-ops).

A case builds a small graph whose last node is the op under test (or, for a fused case, the last node of a
pattern a backend runs as one kernel). Its leafs get fresh random values; the graph is planned without memory
reuse, every tensor and temp block fenced by guard bytes and every block filled with a NaN pattern first (so an
unwritten output or a read past a tensor shows); it is evaluated, and the output is compared by normalised mean
squared error with the reference, computed from the values the op read (a leaf's as given before the run). The
guards must be intact, the leafs unchanged (a kernel must not scribble on its sources; cpy's destination only where
the copy goes), the output's shape that of the reference, and, where the case names one, the kernel that ran.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..alloc import GraphAllocator
from ..graph import Context, Graph
from ..types import BF16, F16, I32
from .cases.util import random_blocks
from .references import REFERENCES
from .references.common import dequantized

GUARD_BYTES = 64


@dataclass
class OpCase:
    """One test: `build(ctx)` returns the node under test; `fill(rng, leaf)` may give a leaf's values.

    reference(node, leafs): the expected output from the leafs' values ({id(leaf): float64 array}): for a pattern a
    backend may fuse (references.evaluate: every node's reference in turn) or a property (a round trip gives its
    input back); without it, the last node's reference on the values its sources hold after the run. kernel: a
    regular expression the name of the CPU step that computes the output must match (the implementation or fused
    kernel that ran)."""

    op: str
    params: str
    build: Callable
    fill: Callable | None = None
    max_nmse: float = 1e-7
    flops: Callable | None = None          # flops(node) for GFLOP/s in perf mode
    tags: tuple = field(default_factory=tuple)
    reference: Callable | None = None
    kernel: str | None = None

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
    """Uniform values in [-1, 1) for float tensors (never zeros), small indices for I32, random blocks for a
    quantized type (cases.util.random_blocks)."""
    shape = tuple(reversed(t.ne))
    if t.type.quantized:
        return random_blocks(rng, t.type, t.ne)
    if t.type == I32:
        return rng.integers(0, 4, size=shape).astype(np.int32)
    return rng.uniform(-1.0, 1.0, size=shape)


def _build(case: OpCase, backend, seed: int):
    ctx = Context()
    out = case.build(ctx)
    if case.reference is None:
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


def _raw(t) -> np.ndarray:
    """t's elements as stored (F16 as its bits, a quantized type's rows as bytes), shape t.storage_shape."""
    return t.buffer.get_tensor(t).reshape(t.storage_shape)


def _values(t, raw=None) -> np.ndarray:
    """t's values (now, or those of its stored elements `raw`) in float64, shape reversed(ne) (a quantized type's
    dequantized by gguf)."""
    raw = _raw(t) if raw is None else raw
    return dequantized(raw, t.type) if t.type.quantized else raw.astype(np.float64)


def _written_by(out_node, base) -> np.ndarray:
    """A mask over `base` (a leaf, as stored) of the elements the view `out_node` covers (cpy writes only those)."""
    mask = np.zeros(int(np.prod(base.storage_shape)), bool)
    if out_node.view_src is base:
        size = base.type.dtype.itemsize
        idx = out_node.view_offs // size
        for n, stride in zip(reversed(out_node.storage_shape), reversed(out_node.storage_strides)):
            idx = np.add.outer(np.arange(n) * (stride // size), idx)
        mask[idx.ravel()] = True
    return mask.reshape(base.storage_shape)


def _check_leafs(out_node, leafs, before, stored=()) -> str:
    """'' when every leaf holds the values it was given (outside what a cpy node writes; `stored`: ids of leafs a
    set_rows node writes, which the case's output reads whole), else what changed."""
    for leaf, old in ((t, b) for t, b in zip(leafs, before) if id(t) not in stored):
        new = _raw(leaf)
        keep = ~_written_by(out_node, leaf)
        if not np.array_equal(new[keep], old[keep], equal_nan=new.dtype.kind == "f"):
            return f"source '{leaf.name or leaf.op}' ne={leaf.ne} was overwritten by the kernel"
    return ""


def compare(case: OpCase, out_node, out: np.ndarray, ref) -> tuple[bool, float, str]:
    ref = np.asarray(ref, dtype=np.float64)
    if ref.shape != out.shape:
        return False, float("nan"), f"output shape {out.shape} (ne={out_node.ne}) but the reference's is {ref.shape}"
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
        return False, float("nan"), (f"output has {int(np.sum(~np.isfinite(out64[~special])))} inf/nan values where "
                                     "the reference is finite (unwritten or read from a guard)")
    err = nmse(out64[~special], ref[~special])
    limit = {F16: max(case.max_nmse, 5e-6), BF16: max(case.max_nmse, 1e-5)}.get(out_node.type, case.max_nmse)
    ok = err <= limit
    return ok, err, "" if ok else f"nmse {err:.3e} > {limit:.1e}"


def _step_name(backend, graph) -> str:
    """The name of the program's last step, which writes the output (a fused step is listed under its first node)."""
    names = [step.name for step in backend.program(graph)]
    return names[-1] if names else ""


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
    leafs = [t for t in graph.leafs if t.buffer is not None]
    before = [_raw(t).copy() for t in leafs]
    backend.compute(graph)
    backend.synchronize()
    alloc.check_guards(graph)
    changed = _check_leafs(out_node, leafs, before, {id(n.view_src) for n in graph.nodes if n.op == "set_rows"})
    if changed:
        return CaseResult(case, False, float("nan"), changed)
    out = _values(out_node) if out_node.type.quantized else out_node.numpy().reshape(tuple(reversed(out_node.ne)))
    given = {id(t): _values(t, raw) for t, raw in zip(leafs, before)}     # a destination leaf as it was before
    if case.reference is not None:
        ref = case.reference(out_node, given)
    else:
        srcs = [None if s is None else given[id(s)] if id(s) in given else _values(s) for s in out_node.src]
        ref = REFERENCES[out_node.op](out_node, srcs)
    ok, err, msg = compare(case, out_node, out, ref)
    ran = _step_name(backend, graph)
    if ok and case.kernel is not None and backend.name == "cpu" and not re.fullmatch(case.kernel, ran):
        ok, msg = False, f"expected a kernel matching {case.kernel!r} to compute it, ran {ran!r}"
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
