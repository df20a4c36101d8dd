"""mul_mat as cuBLASLt GEMMs (nvmath-python's low-level bindings), planned once per graph plan.

ggml's result[n, m] = sum_k a[m, k] b[n, k] is, column-major, D (M x N) = op(A) op(B): a's K-contiguous rows
are a K x M matrix read transposed, b's a K x N matrix. Batches: dim 2 by cuBLASLt's strided batches (a's
stride 0 when it is broadcast), dim 3 (and dim 2 when a repeats r2 > 1 times over several matrices) by a
loop of calls.
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
    """One mul_mat node's cuBLASLt calls: descriptors, algorithm and (A, B, D) pointers fixed per plan."""

    def __init__(self, backend, node, name: str, a, b, ptrs: list, batch: int, tf32: bool, workspace: int):
        self.node, self.name = node, name
        (_, ta, (ka, lda)), (_, tb, (kb, ldb)) = a, b
        K, M = ta.ne[:2]
        N = tb.ne[1]
        gtype = ta.type
        es = gtype.size
        sa = ta.nb[2] // es if ta.ne[2] == node.ne[2] else 0
        sb, sd = tb.nb[2] // es, node.nb[2] // F32.size
        self.handle = handle(backend.device)
        compute = ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else ComputeType.COMPUTE_32F
        self.desc = call(lt.matmul_desc_create, compute, DATA_TYPE[F32])
        for attr, v in ((lt.MatmulDescAttribute.TRANSA, OP_T if ka else OP_N),
                        (lt.MatmulDescAttribute.TRANSB, OP_N if kb else OP_T)):
            _set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, self.desc, attr, v)
        self.a_layout = _layout(gtype, *((K, M) if ka else (M, K)), lda, batch, sa)
        self.b_layout = _layout(gtype, *((K, N) if kb else (N, K)), ldb, batch, sb)
        self.d_layout = _layout(F32, M, N, node.nb[1] // F32.size, batch, sd)
        self.pref = call(lt.matmul_preference_create)
        strides = (sa * es, sb * es, sd * F32.size) if batch > 1 else ()
        P = lt.MatmulPreferenceAttribute
        for attr, v in ((P.MAX_WORKSPACE_BYTES, mm.WORKSPACE),
                        (P.MIN_ALIGNMENT_A_BYTES, _alignment([p[0] for p in ptrs], strides[:1])),
                        (P.MIN_ALIGNMENT_B_BYTES, _alignment([p[1] for p in ptrs], strides[1:2])),
                        (P.MIN_ALIGNMENT_C_BYTES, _alignment([p[2] for p in ptrs], strides[2:])),
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
                            f"M={M} N={N} K={K} batch={batch})")
        self.alpha, self.beta = np.ones(1, np.float32), np.zeros(1, np.float32)
        stream = int(backend.stream.handle)
        self.calls = [(self.handle, self.desc, self.alpha.ctypes.data, pa_, self.a_layout, pb_, self.b_layout,
                       self.beta.ctypes.data, pd, self.d_layout, pd, self.d_layout, self.algo.ptr, workspace,
                       mm.WORKSPACE, stream) for pa_, pb_, pd in ptrs]

    def __call__(self, stream):
        for args in self.calls:
            call(lt.matmul, *args)


def gemm_steps(backend, node) -> list:
    """The steps of a mul_mat node: copies of operands cuBLASLt cannot read in place, then the GEMMs."""
    temp = backend.temp_ptr(node)
    gtype = mm.gemm_type(node)
    ops = [[tensor_ptr(t), t, mm.operand_layout(t, gtype)] for t in node.src[:2]]
    steps = []
    for i, offset, c in mm.conversions(node):
        ptr, t = ops[i][:2]
        steps.append(backend.launch(node, f"copy_{SUFFIX[t.type]}_{SUFFIX[gtype]}", temp + offset, c, [(ptr, t)]))
        ops[i] = [temp + offset, c, (True, c.ne[0])]
    (pa, ta, _), (pb, tb, _) = ops
    A2, A3 = ta.ne[2:]
    B2, B3 = tb.ne[2:]
    r2, r3 = B2 // A2, B3 // A3
    pd = tensor_ptr(node)
    batched = A2 in (1, B2)
    ptrs = [(pa + (i2 // r2) * ta.nb[2] + (i3 // r3) * ta.nb[3], pb + i2 * tb.nb[2] + i3 * tb.nb[3],
             pd + i2 * node.nb[2] + i3 * node.nb[3])
            for i3 in range(B3) for i2 in (range(1) if batched else range(B2))]
    tf32 = gtype == F32 and backend.allow_tf32
    name = mm.kernel_name(node) + ("_tf32" if tf32 else "")
    steps.append(Gemm(backend, node, name, ops[0], ops[1], ptrs, B2 if batched else 1, tf32, temp))
    return steps
