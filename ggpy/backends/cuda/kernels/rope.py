"""rope (ggml_rope_ext): one thread per pair of a row (normal (2j, 2j+1), NEOX (j, j + n_dims/2)), threads past the
rotated pairs copy two values; the angle and its cos/sin in double as the CPU's; F32, F16, BF16, any strides. It
may run in place: a thread reads its pair before writing it, and no two threads share a value."""
from __future__ import annotations

import struct

from ....ops.rope import yarn_corr_dims, yarn_mscale
from ....types import F32, I32
from ..registry import register
from .common import BLOCK, FLOATS, MAX_BLOCKS, SUFFIX, tensor_ptr


def _bits(v: float) -> int:
    """The float32 bits of v as a signed int (Args.ip)."""
    return struct.unpack("<i", struct.pack("<f", v))[0]


def refusal(node) -> str | None:
    a, b = node.src[:2]
    c = node.src[2] if len(node.src) > 2 else None
    if a.type not in FLOATS or node.type != a.type or b.type != I32 or (c is not None and c.type != F32):
        return "rope on CUDA takes F32/F16/BF16 a (result of its type), I32 positions and F32 frequency factors"
    return None


def rope_steps(backend, node, impl=None) -> list:
    """One grid-stride launch over the pairs, the frequency factors' address as Args.src2."""
    p = node.op_params
    low, high = yarn_corr_dims(p)
    srcs = [(tensor_ptr(s), s) for s in node.src]
    units = (node.ne[0] + 1) // 2 * node.ne[1] * node.ne[2] * node.ne[3]
    ints = (p["n_dims"], _bits(p["ext_factor"]), _bits(yarn_mscale(p)), _bits(low), _bits(high))
    return [backend.launch(node, f"rope_{SUFFIX[node.type]}", tensor_ptr(node), node, srcs,
                           (p["freq_base"], p["freq_scale"]), (min(MAX_BLOCKS, -(-units // BLOCK)), BLOCK),
                           int(p["mode"] == 2), ints)]


register(ops=("rope",), refusal=refusal, name=lambda node, impl: f"rope_{SUFFIX[node.type]}",
         steps=rope_steps)
