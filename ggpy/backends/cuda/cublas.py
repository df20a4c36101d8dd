"""mul_mat as cuBLASLt GEMMs (nvmath-python's low-level bindings), planned once per graph plan.

ggml's result[n, m] = sum_k a[m, k] b[n, k] is, column-major, D (M x N) = op(A) op(B): a's K-contiguous rows
are a K x M matrix read transposed, b's a K x N matrix. Batches (plan_batches): one GEMM over all rows when a
is one matrix and b's rows are uniform; else dims 2 and 3 as one strided batch when their strides allow (a's
stride 0 when it is broadcast); else the dim with more matrices strided-batched and the other looped (a dim
where a repeats r > 1 times over several matrices is always looped). A bias add fused after the node runs as
cuBLASLt's BIAS epilogue (backend.py: fused_groups).
"""
from __future__ import annotations

import weakref

import numpy as np
from nvmath.bindings import cublasLt as lt
from nvmath.bindings.cublas import ComputeType

from ...errors import CudaError
from ...types import F16, F32
from .backend import tensor_ptr
from .kernels import matmul as mm
from .kernels.common import SUFFIX

DATA_TYPE = {F32: 0, F16: 2}        # cudaDataType CUDA_R_32F, CUDA_R_16F
OP_N, OP_T = 0, 1
_HANDLES = {}


def call(fn, *args):
    """fn(*args), a cuBLASLt failure raised as CudaError naming the call and the status."""
    try:
        return fn(*args)
    except lt.cuBLASLtError as e:
        raise CudaError(f"cublasLt {fn.__name__} failed: {e}") from None


def handle(device) -> int:
    """The cuBLASLt handle of `device` (made once per process)."""
    if device.index not in _HANDLES:
        device.activate()
        _HANDLES[device.index] = call(lt.create)
    return _HANDLES[device.index]


def _set(setter, dtype_of, obj: int, attr, value):
    buf = np.array(value, dtype=dtype_of(attr))
    call(setter, obj, attr, buf.ctypes.data, buf.nbytes)


def _layout(type_, rows: int, cols: int, ld: int, batch: int, stride: int) -> int:
    lay = call(lt.matrix_layout_create, DATA_TYPE[type_], rows, cols, ld)
    if batch > 1:
        for attr, v in ((lt.MatrixLayoutAttribute.BATCH_COUNT, batch),
                        (lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, stride)):
            _set(lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype, lay, attr, v)
    return lay


def _destroy(desc, layouts, pref):
    lt.matmul_desc_destroy(desc)
    for lay in layouts:
        lt.matrix_layout_destroy(lay)
    lt.matmul_preference_destroy(pref)


def _alignment(ptrs, strides) -> int:
    """The largest power of two (<= 256) dividing every address and batch stride in bytes."""
    v = 256
    for x in list(ptrs) + [s for s in strides if s]:
        v = min(v, x & -x)
    return v


class Gemm:
    """One mul_mat node's cuBLASLt calls: descriptors, algorithm and (A, B, D) pointers fixed per plan.
    N is the columns of D per call (all the rows of b when they merge into one GEMM), `strides` the byte
    strides of A, B and D between the `batch` matrices of one strided-batched call, `bias` the device
    address of an F32 vector of M added to every column of D (cuBLASLt's BIAS epilogue), `dst` the tensor D
    is laid out as (the node, or the add it is fused with), `c_ptrs` (one per call) the C matrix laid out as
    D and added with beta = 1 (a fused residual add); without it beta = 0."""

    def __init__(self, backend, node, name: str, a, b, N: int, ptrs: list, batch: int, strides: tuple,
                 tf32: bool, workspace: int, bias: int | None = None, dst=None, c_ptrs: list | None = None):
        self.node, self.name = node, name
        dst = node if dst is None else dst
        (_, ta, (ka, lda)), (_, _, (kb, ldb)) = a, b
        K, M = ta.ne[:2]
        gtype = ta.type
        es = gtype.size
        sa, sb, sd = (strides[0] // es, strides[1] // es, strides[2] // F32.size) if batch > 1 else (0, 0, 0)
        self.handle = handle(backend.device)
        compute = ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else ComputeType.COMPUTE_32F
        self.desc = call(lt.matmul_desc_create, compute, DATA_TYPE[F32])
        attrs = [(lt.MatmulDescAttribute.TRANSA, OP_T if ka else OP_N),
                 (lt.MatmulDescAttribute.TRANSB, OP_N if kb else OP_T)]
        if bias is not None:
            attrs += [(lt.MatmulDescAttribute.EPILOGUE, int(lt.Epilogue.BIAS)),
                      (lt.MatmulDescAttribute.BIAS_POINTER, bias)]
        for attr, v in attrs:
            _set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, self.desc, attr, v)
        self.a_layout = _layout(gtype, *((K, M) if ka else (M, K)), lda, batch, sa)
        self.b_layout = _layout(gtype, *((K, N) if kb else (N, K)), ldb, batch, sb)
        self.d_layout = _layout(F32, M, N, dst.nb[1] // F32.size if dst.ne[1] > 1 else M, batch, sd)
        self.pref = call(lt.matmul_preference_create)
        strides = tuple(strides) if batch > 1 else ()
        P = lt.MatmulPreferenceAttribute
        for attr, v in ((P.MAX_WORKSPACE_BYTES, mm.WORKSPACE),
                        (P.MIN_ALIGNMENT_A_BYTES, _alignment([p[0] for p in ptrs], strides[:1])),
                        (P.MIN_ALIGNMENT_B_BYTES, _alignment([p[1] for p in ptrs], strides[1:2])),
                        (P.MIN_ALIGNMENT_C_BYTES, _alignment(c_ptrs or [p[2] for p in ptrs], strides[2:])),
                        (P.MIN_ALIGNMENT_D_BYTES, _alignment([p[2] for p in ptrs], strides[2:]))):
            _set(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype, self.pref, attr, v)
        layouts = (self.a_layout, self.b_layout, self.d_layout)
        weakref.finalize(self, _destroy, self.desc, layouts, self.pref)
        self.algo = lt.MatmulHeuristicResult(1)
        found = np.zeros(1, np.int32)
        call(lt.matmul_algo_get_heuristic, self.handle, self.desc, self.a_layout, self.b_layout, self.d_layout,
             self.d_layout, self.pref, 1, self.algo.ptr, found.ctypes.data)
        if found[0] == 0:
            raise CudaError(f"cublasLt found no algorithm for node '{node.name}' (mul_mat {gtype.name}, "
                            f"M={M} N={N} K={K} batch={batch}{', bias' if bias is not None else ''})")
        self.alpha = np.ones(1, np.float32)
        self.beta = np.ones(1, np.float32) if c_ptrs else np.zeros(1, np.float32)
        stream = int(backend.stream.handle)
        c_ptrs = c_ptrs or [pd for _, _, pd in ptrs]
        self.calls = [(self.handle, self.desc, self.alpha.ctypes.data, pa_, self.a_layout, pb_, self.b_layout,
                       self.beta.ctypes.data, pc, self.d_layout, pd, self.d_layout, self.algo.ptr, workspace,
                       mm.WORKSPACE, stream) for (pa_, pb_, pd), pc in zip(ptrs, c_ptrs)]

    def at(self, i: int) -> Gemm:
        """A step running only call i (the descriptors and algorithm shared; self kept alive with it)."""
        other = object.__new__(Gemm)
        other.__dict__.update(self.__dict__)
        other.calls, other._parent = [self.calls[i]], self
        return other

    def __call__(self, stream):
        for args in self.calls:
            call(lt.matmul, *args)


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
    if ta.ne[2] == ta.ne[3] == 1 and kb and _rows_uniform(tb, ldb * es) and _rows_uniform(d, ldd * F32.size):
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
    `add` (an add of an F32 bias vector over ne[0] fused after the node), D goes to add's memory with the bias
    added by cuBLASLt's BIAS epilogue; with `residual_node` too (an add of the contiguous `residual` after the
    bias add, add and node contiguous), D goes to residual_node's memory and C = residual with beta = 1."""
    temp = backend.temp_ptr(node)
    gtype = mm.gemm_type(node)
    ops = [[tensor_ptr(t), t, mm.operand_layout(t, gtype)] for t in node.src[:2]]
    steps = []
    for i, offset, c in mm.conversions(node):
        ptr, t = ops[i][:2]
        steps.append(backend.launch(node, f"copy_{SUFFIX[t.type]}_{SUFFIX[gtype]}", temp + offset, c, [(ptr, t)]))
        ops[i] = [temp + offset, c, (True, c.ne[0])]
    (pa, ta, _), (pb, tb, (kb, ldb)) = ops
    dst = node if add is None else add
    pd = tensor_ptr(dst if residual_node is None else residual_node)
    ldd = dst.nb[1] // F32.size if dst.ne[1] > 1 else dst.ne[0]
    N, batch, strides, offsets = plan_batches(ta, tb, kb, ldb, dst, ldd)
    ptrs = [(pa + oa, pb + ob, pd + od) for oa, ob, od in offsets]
    c_ptrs = None if residual_node is None else [tensor_ptr(residual) + od for _, _, od in offsets]
    tf32 = gtype == F32 and backend.allow_tf32
    name = (mm.kernel_name(node) + ("_tf32" if tf32 else "") + ("+bias" if add is not None else "")
            + ("+residual" if residual_node is not None else ""))
    bias = tensor_ptr(add.src[1]) if add is not None else None
    steps.append(Gemm(backend, node, name, ops[0], ops[1], N, ptrs, batch, strides, tf32, temp, bias, dst,
                      c_ptrs))
    return steps
