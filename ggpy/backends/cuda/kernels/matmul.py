"""mul_mat as cuBLASLt GEMMs (cublas.py): no CUDA C of its own, the node runs as Python-side steps.
a.ne = (K, M, A2, A3), b.ne = (K, N, B2, B3), F32, F16 or BF16 each, a also quantized (a dequantized F16 copy in the
GEMM); few columns of b with a quantized, grouped or differently typed a run as quant.py's dot-product kernel
instead (quant.uses_mmv). Result F32 (M, N, B2, B3), or the
operands' type when both have it and a cast of the result is fused (the fusion pass's epilogue). Operands that cuBLASLt
cannot read in place are copied into the temp block.

ggml's result[n, m] = sum_k a[m, k] b[n, k] is, column-major, D (M x N) = op(A) op(B): a's K-contiguous rows
are a K x M matrix read transposed, b's a K x N matrix. Batches (plan_batches): one GEMM over all rows when a
is one matrix and b's rows are uniform; else dims 2 and 3 as one strided batch when their strides allow (a's
stride 0 when it is broadcast); else the dim with more matrices strided-batched and the other looped (a dim
where a repeats r > 1 times over several matrices is always looped). A fused bias add runs as cuBLASLt's BIAS
epilogue, a fused residual add as its C matrix.
"""
from __future__ import annotations

from types import SimpleNamespace

from ....types import BF16, F16, F32
from ..cublas import MISSING, WORKSPACE, Gemm
from ..registry import register
from . import quant
from .common import FLOATS, SUFFIX, tensor_ptr

ALIGN = 256


def refusal(node) -> str | None:
    a, b = node.src[:2]
    if (a.type not in FLOATS and not a.type.quantized) or b.type not in FLOATS:
        return f"mul_mat on CUDA takes F32, F16, BF16 or quantized a and a float b, not {a.type.name} x {b.type.name}"
    return None if MISSING is None or quant.uses_mmv(node) else f"mul_mat on CUDA {MISSING}"


def kernel_name(node) -> str:
    a, b = node.src[:2]
    return quant.mmv_name(node) if quant.uses_mmv(node) else f"cublaslt_{a.type.name.lower()}_{b.type.name.lower()}"


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


def conversions(node) -> list:
    """[(operand index, temp offset, contiguous layout)] of the operands copied before the GEMM; the temp block
    starts with the workspace."""
    out, offset, type_ = [], WORKSPACE, gemm_type(node)
    for i, t in enumerate(node.src[:2]):
        if operand_layout(t, type_) is None:
            c = contiguous(t, type_)
            out.append((i, offset, c))
            offset += align_temp(c.nbytes)
    return out


def temp_size(node) -> int:
    """The workspace plus the operand copies (none for the dot-product kernel)."""
    if quant.uses_mmv(node):
        return 0
    return WORKSPACE + sum(align_temp(c.nbytes) for _, _, c in conversions(node))


def _rows_uniform(t, row_stride: int) -> bool:
    """Whether t's rows (dim 1) continue through dims 2 and 3 at one stride (one matrix of ne1*ne2*ne3 rows)."""
    expected = row_stride * t.ne[1]
    for k in (2, 3):
        if t.ne[k] > 1:
            if t.nb[k] != expected:
                return False
            expected *= t.ne[k]
    return True


def plan_batches(ta, tb, kb: bool, ldb: int, d, ldd: int):
    """How the (A2*A3 vs B2*B3) matrices of a mul_mat become cuBLASLt calls: (N per call, batch count, byte
    strides (A, B, D) between batched matrices, [(A, B, D) byte offsets of each call]).
    One GEMM over all rows when a is one matrix and b's and d's rows are uniform; else dims 2 and 3 merged into
    one strided batch when their strides allow; else the larger strided dim batched, the other looped."""
    es = ta.type.size
    N = tb.ne[1]
    B2, B3 = tb.ne[2:]
    if ta.ne[2] == ta.ne[3] == 1 and kb and _rows_uniform(tb, ldb * es) and _rows_uniform(d, ldd * d.type.size):
        return N * B2 * B3, 1, (0, 0, 0), [(0, 0, 0)]
    r = {k: tb.ne[k] // ta.ne[k] for k in (2, 3)}

    def stride(k):
        sa = ta.nb[k] if ta.ne[k] == tb.ne[k] else 0 if ta.ne[k] == 1 else None
        return None if sa is None else (sa, tb.nb[k], d.nb[k])
    dims = [k for k in (2, 3) if tb.ne[k] > 1]
    s = {k: stride(k) for k in dims}
    if len(dims) == 2 and s[2] is not None and s[3] is not None and all(s[3][j] == s[2][j] * B2 for j in range(3)):
        return N, B2 * B3, s[2], [(0, 0, 0)]
    strided = [k for k in dims if s[k] is not None]
    bdim = max(strided, key=lambda k: tb.ne[k]) if strided else None
    loop = [k for k in dims if k != bdim]
    offsets = [(0, 0, 0)]
    for k in loop:
        offsets = [(oa + (i // r[k]) * ta.nb[k], ob + i * tb.nb[k], od + i * d.nb[k])
                   for oa, ob, od in offsets for i in range(tb.ne[k])]
    if bdim is None:
        return N, 1, (0, 0, 0), offsets
    return N, tb.ne[bdim], s[bdim], offsets


def gemm_steps(backend, node, add=None, residual_node=None, residual=None) -> list:
    """The steps of a mul_mat node: copies of operands cuBLASLt cannot read in place, then the GEMMs. With
    `add` (an add of a bias vector over ne[0] fused after the node, perhaps through a cast: the add's type is D's),
    D goes to add's memory with the bias added by cuBLASLt's BIAS epilogue; with `residual_node` too (an add of the contiguous `residual` after the
    bias add, add and node contiguous), D goes to residual_node's memory and C = residual with beta = 1. A node
    quant.uses_mmv takes runs as quant.py's dot-product kernel instead (never fused)."""
    if quant.uses_mmv(node):
        return quant.mmv_steps(backend, node)
    temp = backend.temp_ptr(node)
    gtype = gemm_type(node)
    ops = [[tensor_ptr(t), t, operand_layout(t, gtype)] for t in node.src[:2]]
    steps = []
    for i, offset, c in conversions(node):
        ptr, t = ops[i][:2]
        steps.append(backend.launch(node, f"copy_{SUFFIX[t.type]}_{SUFFIX[gtype]}", temp + offset, c, [(ptr, t)]))
        ops[i] = [temp + offset, c, (True, c.ne[0])]
    (pa, ta, _), (pb, tb, (kb, ldb)) = ops
    dst = node if add is None else add
    pd = tensor_ptr(dst if residual_node is None else residual_node)
    ldd = dst.nb[1] // dst.type.size if dst.ne[1] > 1 else dst.ne[0]
    N, batch, strides, offsets = plan_batches(ta, tb, kb, ldb, dst, ldd)
    ptrs = [(pa + oa, pb + ob, pd + od) for oa, ob, od in offsets]
    c_ptrs = None if residual_node is None else [tensor_ptr(residual) + od for _, _, od in offsets]
    tf32 = gtype == F32 and backend.allow_tf32
    name = (kernel_name(node) + ("_tf32" if tf32 else "") + (f"+{dst.type.name}" if dst.type != F32 else "")
            + ("+bias" if add is not None else "")
            + ("+residual" if residual_node is not None else ""))
    bias = tensor_ptr(add.src[1]) if add is not None else None
    steps.append(Gemm(backend, node, name, ops[0], ops[1], N, ptrs, batch, strides, tf32, temp, bias, dst,
                      c_ptrs))
    return steps


register(ops=("mul_mat",), source=quant.source, refusal=refusal, kernel_name=kernel_name, temp_size=temp_size,
         steps=gemm_steps)
