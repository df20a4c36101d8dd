"""How a product maps onto cuBLASLt's operands, shared by the families that run GEMMs (matmul, conv) and by cuDNN's
convolution: the GEMM's operand type, whether cuBLASLt reads an operand in place, the layout of a contiguous copy,
and where the next block of a node's temp starts (align_temp)."""
from __future__ import annotations

from types import SimpleNamespace

from ...types import BF16, F16, F32

ALIGN = 256


def gemm_type(node):
    """The operands' type in the GEMM: F16 or BF16 when both have it (F32 accumulation), F16 for a quantized a (a
    dequantized copy, ggml's cuBLAS path too), else F32."""
    a, b = node.src[:2]
    if a.type.quantized:
        return F16
    return a.type if a.type == b.type and a.type in (F16, BF16) else F32


def operand_layout(t, type_) -> tuple[bool, int] | None:
    """How cuBLASLt reads t (ne = (K, R, ...)) in place: (True, ld) when each row of K elements is contiguous
    (a column-major K x R matrix), (False, ld) when each column of R is (an R x K matrix); None when it cannot
    (another type, or no unit stride in dims 0 and 1), and t must be copied first."""
    es = type_.size
    (ne0, ne1), (nb0, nb1) = t.ne[:2], t.nb[:2]
    if t.type != type_ or any(nb % es for nb in t.nb):
        return None
    if nb0 == es and (ne1 == 1 or nb1 >= ne0 * es):
        return True, nb1 // es if ne1 > 1 else ne0
    if nb1 == es and (ne0 == 1 or nb0 >= ne1 * es):
        return False, nb0 // es if ne0 > 1 else ne1
    return None


def contiguous(t, type_):
    """The layout (ne, nb, nelements, nbytes, type) of a contiguous copy of t in `type_`."""
    nb = [type_.size]
    for n in t.ne[:3]:
        nb.append(nb[-1] * n)
    return SimpleNamespace(ne=tuple(t.ne), nb=tuple(nb), nelements=t.nelements, nbytes=t.nelements * type_.size,
                           type=type_, name=f"{t.name} ({type_.name} copy)")


def align_temp(n: int) -> int:
    """n bytes rounded up to ALIGN: where the next block of a node's temp starts."""
    return (n + ALIGN - 1) // ALIGN * ALIGN
