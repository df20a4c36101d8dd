"""dup, cont (and cont_Nd) and cpy: elements taken from src0 and written to dst in ne order, any strides on
both sides, F32 <-> F16 converted, I32 copied as is. For cpy, dst is the view of b the node describes.
32-bit index math where the tensors fit (iparam32)."""
from __future__ import annotations

from ....types import F16, F32, I32
from .common import C_TYPES, SUFFIX, iparam32

OPS = ("dup", "cont", "cpy")
PAIRS = ((F32, F32), (F32, F16), (F16, F32), (F16, F16), (I32, I32))

_TEMPLATE = r"""
template <typename S, typename D, typename I> __device__ void copy_i(const Args& a) {
    FOR_EACH_ELEMENT_I(a, i, I) {
        I cs[4], cd[4];
        unravel(i, a.ne0, cs);
        unravel(i, a.ne, cd);
        *(D*)(a.dst + byte_offset(cd, a.nb)) = convert<D, S>(*(const S*)(a.src0 + byte_offset(cs, a.nb0)));
    }
}
template <typename S, typename D> __device__ void copy(const Args& a) { DISPATCH_I(a, copy_i, S, D); }
"""


def kernel_name(node) -> str:
    return f"copy_{SUFFIX[node.src[0].type]}_{SUFFIX[node.type]}"


def supports(node) -> bool:
    return (node.op in OPS and node.src[0] is not None and (node.src[0].type, node.type) in PAIRS
            and node.src[0].nelements == node.nelements)


def params(node) -> tuple:
    return ()


def iparam(node) -> int:
    return iparam32(node)


def source() -> str:
    return _TEMPLATE + "".join(
        f'extern "C" __global__ void copy_{SUFFIX[s]}_{SUFFIX[d]}(const Args a) {{ copy<{C_TYPES[s]}, {C_TYPES[d]}>(a); }}\n'
        for s, d in PAIRS)
