"""mul_mat through cuBLASLt (nvmath-python's bindings): no CUDA C of its own, the node runs as Python-side
steps (ggpy/backends/cuda/cublas.py). a.ne = (K, M, A2, A3), b.ne = (K, N, B2, B3), F32 or F16 each;
result F32 (M, N, B2, B3). Operands that cuBLASLt cannot read in place are copied into the temp block."""
from __future__ import annotations

import functools
from types import SimpleNamespace

from ....types import F16, F32

OPS = ("mul_mat",)
FLOATS = (F32, F16)
WORKSPACE = 32 << 20        # cuBLASLt workspace bytes (what it suggests for Hopper)
ALIGN = 256


@functools.cache
def _nvmath_missing() -> str | None:
    try:
        from nvmath.bindings import cublasLt  # noqa: F401
    except Exception as e:  # noqa: BLE001 - missing package or libraries: either way no cuBLASLt
        return f"mul_mat on CUDA needs nvmath-python's cuBLASLt bindings (pip install nvmath-python): {e}"
    return None


def refusal(node) -> str | None:
    if any(s.type not in FLOATS for s in node.src[:2]):
        return "mul_mat on CUDA takes F32 and F16 operands"
    return _nvmath_missing()


def supports(node) -> bool:
    return node.op in OPS and refusal(node) is None


def kernel_name(node) -> str:
    a, b = node.src[:2]
    return f"cublaslt_{a.type.name.lower()}_{b.type.name.lower()}"


def params(node) -> tuple:
    return ()


def source() -> str:
    return ""


def gemm_type(node):
    """The operands' type in the GEMM: F16 when both are F16 (F32 accumulation), else F32."""
    return F16 if all(s.type == F16 for s in node.src[:2]) else F32


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


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def conversions(node) -> list:
    """[(operand index, temp offset, contiguous layout)] of the operands copied before the GEMM; the temp block
    starts with the workspace."""
    out, offset, type_ = [], WORKSPACE, gemm_type(node)
    for i, t in enumerate(node.src[:2]):
        if operand_layout(t, type_) is None:
            c = contiguous(t, type_)
            out.append((i, offset, c))
            offset += _align(c.nbytes)
    return out


def temp_size(node) -> int:
    """The workspace plus the operand copies."""
    return WORKSPACE + sum(_align(c.nbytes) for _, _, c in conversions(node))


def steps(backend, node, add=None, residual_node=None, residual=None) -> list:
    """The node's cuBLASLt steps; with `add` (a bias add fused after it) D goes to add's memory, bias added;
    with `residual_node` (an add of `residual` after that) D = A B + bias + residual goes to its memory."""
    from ..cublas import gemm_steps
    return gemm_steps(backend, node, add, residual_node, residual)
