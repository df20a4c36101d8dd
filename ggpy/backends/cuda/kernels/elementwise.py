"""Binary ops with ggml broadcasting (b repeats over a), the unary functions, sin, cos, scale, clamp and leaky_relu
(their math: ops.cuh's functors, which the chain kernels of the fusion pass use too; the kernels: elementwise.cuh,
instantiated per type by elementwise_<type>.cu and elementwise_unary_<type>.cu).

dst has a's ne; every source may have any strides. Math runs in float, F16 is converted on load and store.
Fast path (`_c_` kernels): when dst and the sources are contiguous, under 2^31 elements, and b's dims are one
block of a's (same shape, a row vector over ne[0], a per-channel vector over ne[2], ...), flat 32-bit indices
replace the per-element unravel (b's index is (i / inner) % b's elements). The others unravel in 32 bits
where the tensors fit (iparam32)."""
from __future__ import annotations

from ..registry import register
from .common import BLOCK, FLOATS, MAX_BLOCKS, SUFFIX, iparam32
from .generated import BINARY, CHAIN, PARAMS, UNARY


def _inner(node) -> int | None:
    """For b of a binary op: the product of a's dims before b's first non-broadcast dim when b's dims are one
    block of a's (b.ne[k] == a.ne[k] for k in [k0, k1), 1 elsewhere), so b's flat index is (i / inner) % b's
    elements; None otherwise."""
    b = node.src[1]
    full = [k for k in range(4) if node.ne[k] > 1 and b.ne[k] == node.ne[k]]
    if any(b.ne[k] not in (1, node.ne[k]) for k in range(4)):
        return None
    if full and any(b.ne[k] == 1 and node.ne[k] > 1 for k in range(full[0], full[-1])):
        return None
    inner = 1
    for k in range(full[0] if full else 0):
        inner *= node.ne[k]
    return inner


def flat(node) -> bool:
    """Whether the node runs on flat 32-bit indices: everything contiguous, and b (binary ops) one block of
    a's dims (_inner: a row vector over ne[0], a per-channel vector over ne[2], same shape, ...)."""
    if node.nelements >= 1 << 31 or not node.is_contiguous():
        return False
    srcs = [s for s in node.src if s is not None]
    if not all(s.is_contiguous() for s in srcs) or srcs[0].ne != node.ne:
        return False
    return node.op not in BINARY or _inner(node) is not None


def _vec(node) -> int:
    """Elements per 16-byte access of a flat unary node whose elements come in 16-byte aligned groups (4 F32 or
    8 F16/BF16; needs its memory planned), else 1."""
    w = 16 // node.type.size
    if node.op in BINARY or node.nelements % w or not flat(node):
        return 1
    ts = [node, node.src[0]]
    if any(getattr(t.buffer, "tensor_ptr", None) is None for t in ts):
        return 1
    return w if all(t.buffer.tensor_ptr(t) % 16 == 0 for t in ts) else 1


def iparam(node) -> int:
    """Flat binary kernels: b's `inner` (see _inner); flat unary: the elements per 16-byte access (_vec; 0 for
    scalar access); the others: 32-bit index math where the tensors fit."""
    if not flat(node):
        return iparam32(node)
    if node.op in BINARY:
        return _inner(node)
    w = _vec(node)
    return w if w > 1 else 0


def launch_config(node):
    """The default grid-stride launch, over groups of 4 or 8 elements for vector unary kernels."""
    n = node.nelements // _vec(node)
    return min(MAX_BLOCKS, max(1, (n + BLOCK - 1) // BLOCK)), BLOCK


def kernel_name(node, impl=None) -> str:
    c = "c_" if flat(node) else ""
    if node.op in BINARY:
        return f"{node.op}_{c}{SUFFIX[node.src[0].type]}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{c}{SUFFIX[node.type]}"


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 sources and writes the first one's type"
    return None


def params(node) -> tuple:
    return tuple(node.op_params[k] for k in PARAMS.get(node.op, ()))


register(ops=tuple(BINARY) + tuple(UNARY), refusal=refusal, name=kernel_name, params=params,
         iparam=iparam, launch_config=launch_config, fuses={"chain": CHAIN})
