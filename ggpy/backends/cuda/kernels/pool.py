"""pool_2d (max, avg) and upscale (nearest, bilinear, bilinear align-corners): one thread per dst element, sources
of any strides, F32/F16 converted on load and store; pool_2d's (k0, k1, s0, s1, p0, p1) travel as Args.ip."""
from __future__ import annotations

from ..registry import register
from .common import FLOATS, SUFFIX

UPSCALE_MODES = {("nearest", False): "nearest", ("bilinear", False): "bilinear", ("bilinear", True): "bilinear_ac"}


def kernel_name(node, impl=None) -> str:
    t = SUFFIX[node.src[0].type]
    p = node.op_params
    if node.op == "pool_2d":
        return f"pool_2d_{p['op']}_{t}"
    return f"upscale_{UPSCALE_MODES[p['mode'], p['align_corners']]}_{t}"


def refusal(node) -> str | None:
    if node.src[0].type not in FLOATS:
        return f"{node.op} on CUDA takes an F32/F16 source, got {node.src[0].type.name}"
    if node.op == "upscale" and (node.op_params["mode"], node.op_params["align_corners"]) not in UPSCALE_MODES:
        return f"upscale on CUDA has no kernel for mode {node.op_params['mode']!r}"
    if node.op == "upscale" and node.type != node.src[0].type:
        return "upscale on CUDA writes the source's type"
    return None


def int_params(node) -> tuple:
    """pool_2d's (k0, k1, s0, s1, p0, p1) as Args.ip."""
    if node.op != "pool_2d":
        return ()
    p = node.op_params
    return (*p["k"], *p["s"], *p["p"])


register(ops=("pool_2d", "upscale"), refusal=refusal, name=kernel_name, int_params=int_params)
