"""What each profiled kernel moves and computes, from its nodes' shapes: achieved bandwidth and FLOP/s per kernel,
beside a GPU's peaks.

    costs = kernel_costs(backend, graph, backend.profile(graph))   # {kernel name: Cost} summed over its steps
    print(cost_table(costs, peaks_of(device_name), "f16", per=8))

A step is one kernel: a node alone, or a fused pattern (the backend's fusions) computing several nodes at its head's
turn. It reads each operand from outside the step once (a view's own elements: a window of a tensor counts as that
window) and writes each computed node that something outside the step reads (or that is an output). Operations:
2 K per output element of mul_mat, 2 KW KH (Cin) of conv_2d_dw (conv_2d), 2 (Dk + Dv) Nk per query row of
flash_attn_ext, one per element for the rest; views none. These are the minimum traffic and the useful arithmetic
(padding, re-reads through caches and recomputed halos are not counted).
"""
from __future__ import annotations

from dataclasses import dataclass

from ggpy.graph.fusion import consumers, operand
from ggpy.optable import is_view

# NVIDIA's data sheets (SXM parts): HBM bytes/s, dense FLOP/s by the precision of the products
PEAKS = {"H200": (4.8e12, {"f32": 67e12, "tf32": 495e12, "f16": 989e12, "bf16": 989e12}),
         "H100": (3.35e12, {"f32": 67e12, "tf32": 495e12, "f16": 989e12, "bf16": 989e12})}


@dataclass
class Cost:
    """A kernel's summed steps: seconds, bytes read and written, floating-point operations, steps."""
    seconds: float = 0.0
    bytes: int = 0
    flops: int = 0
    steps: int = 0


def peaks_of(device_name: str) -> tuple | None:
    """(bytes/s, {precision: FLOP/s}) of the first PEAKS entry named in `device_name`, or None."""
    return next((v for k, v in PEAKS.items() if k in device_name), None)


def tensor_bytes(t) -> int:
    """The bytes of t's elements (a quantized type's blocks), whatever its strides."""
    return t.type.row_bytes(t.ne[0]) * t.nrows


def node_flops(node) -> int:
    """Floating-point operations of one node (see the module's docstring)."""
    if is_view(node):
        return 0
    a = node.src[0] if node.src else None
    if node.op == "mul_mat":
        return 2 * a.ne[0] * node.nelements
    if node.op == "conv_2d_dw":
        return 2 * a.ne[0] * a.ne[1] * node.nelements
    if node.op == "conv_2d":
        return 2 * a.ne[0] * a.ne[1] * a.ne[2] * node.nelements
    if node.op == "flash_attn_ext":
        q, k, v = node.src[:3]
        return 2 * (k.ne[0] + v.ne[0]) * k.ne[1] * q.ne[1] * q.ne[2] * q.ne[3]
    return node.nelements


def step_cost(node, fusion, users, timed=frozenset()) -> tuple[int, int]:
    """(bytes, flops) of the step headed by `node` (fusion: the pattern it heads, or None), users: consumers(graph);
    the pattern's nodes in `timed` (ids of nodes that ran as steps of their own: the backend declined that part of
    it) are left to their own steps."""
    computed = [n for n in (fusion.computed if fusion is not None else [node]) if n is node or id(n) not in timed]
    inside = {id(n) for n in computed} | {id(v) for v in (fusion.skipped if fusion is not None else ())}
    read, written = {}, 0
    for n in computed:
        for s in n.src:
            if s is not None and id(s) not in inside and id(operand(s)) not in inside:
                read[id(s)] = tensor_bytes(s)
        if n is computed[-1] or n.is_output or any(id(u) not in inside for u in users.get(id(n), [])):
            written += tensor_bytes(n)
    return sum(read.values()) + written, sum(node_flops(n) for n in computed)


def kernel_costs(backend, graph, timings) -> dict:
    """{kernel name: Cost} of a profiled evaluation (timings: Backend.profile's rows for `graph`). A node's step is
    costed at its longest row (a step of several launches, im2col and GEMM: the GEMM); its other rows and rows of
    no node add time."""
    fusions, users, out = backend.fusions(graph), consumers(graph), {}
    timed, longest = {id(t.node) for t in timings if t.node is not None}, {}
    for i, t in enumerate(timings):
        if t.node is not None and (id(t.node) not in longest or t.seconds > timings[longest[id(t.node)]].seconds):
            longest[id(t.node)] = i
    for i, t in enumerate(timings):
        nbytes = flops = 0
        if t.node is not None and longest[id(t.node)] == i:
            nbytes, flops = step_cost(t.node, fusions.get(id(t.node)), users, timed)
        c = out.setdefault(t.name, Cost())
        c.seconds, c.bytes, c.flops, c.steps = c.seconds + t.seconds, c.bytes + nbytes, c.flops + flops, c.steps + 1
    return out


def cost_table(costs: dict, peaks: tuple | None, precision: str, per: int = 1, top: int = 15) -> str:
    """A markdown table of the `top` kernels by time: ms, GB/s and TFLOP/s (and their share of `peaks`, the
    products' peak taken at `precision`), times divided by `per` (images of a batch)."""
    bw, flops = peaks if peaks is not None else (None, {})
    peak = flops.get(precision)
    rows = ["| kernel | steps | ms | GB/s | of HBM peak | TFLOP/s | of compute peak |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in sorted(costs.items(), key=lambda kv: -kv[1].seconds)[:top]:
        rate, fl = c.bytes / c.seconds if c.seconds else 0.0, c.flops / c.seconds if c.seconds else 0.0
        rows.append(f"| {name} | {c.steps} | {c.seconds / per * 1e3:.3f} | {rate / 1e9:.0f} | "
                    + (f"{rate / bw:.0%}" if bw else "-") + f" | {fl / 1e12:.1f} | "
                    + (f"{fl / peak:.1%}" if peak else "-") + " |")
    return "\n".join(rows)
