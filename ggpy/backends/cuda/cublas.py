"""cuBLASLt GEMMs through nvmath-python's low-level bindings: one Gemm step is a node's cuBLASLt calls with their
descriptors, algorithm and pointers fixed per plan. `MISSING` says why cuBLASLt is unavailable (None when it is).
How mul_mat and conv_2d map onto GEMMs is theirs to say (kernels/matmul.py, kernels/conv.py).
"""
from __future__ import annotations

import weakref

import numpy as np

from ...errors import CudaError
from ...types import BF16, F16, F32

try:
    from nvmath.bindings import cublasLt as lt
    from nvmath.bindings.cublas import ComputeType
    MISSING = None
except Exception as e:  # noqa: BLE001 - missing package or libraries: either way no cuBLASLt
    lt = ComputeType = None
    MISSING = f"needs nvmath-python's cuBLASLt bindings (pip install nvmath-python): {e}"

WORKSPACE = 32 << 20        # cuBLASLt workspace bytes (what it suggests for Hopper)

DATA_TYPE = {F32: 0, F16: 2, BF16: 14}        # cudaDataType CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF
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


def heuristic(h: int, desc: int, layouts: tuple, pref: int, results, count: int) -> int:
    """How many of cuBLASLt's `count` best algorithms for the GEMM (desc, (A, B, C, D) layouts, pref) it wrote to
    `results` (a MatmulHeuristicResult array of count)."""
    found = np.zeros(1, np.int32)
    call(lt.matmul_algo_get_heuristic, h, desc, *layouts, pref, count, results.ptr, found.ctypes.data)
    return int(found[0])


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
    address of a vector of M (of D's type) added to every column of D (cuBLASLt's BIAS epilogue), `dst` the
    tensor D is laid out as and typed as (the node, F32, or the add it is fused with: F32, or the operands' type
    through a fused cast), `c_ptrs` (one per call) the C matrix laid out as
    D and added with beta = 1 (a fused residual add); without it beta = 0."""

    def __init__(self, backend, node, name: str, a, b, N: int, ptrs: list, batch: int, strides: tuple,
                 tf32: bool, workspace: int, bias: int | None = None, dst=None, c_ptrs: list | None = None):
        self.node, self.name = node, name
        dst = node if dst is None else dst
        (_, ta, (ka, lda)), (_, _, (kb, ldb)) = a, b
        K, M = ta.ne[:2]
        gtype = ta.type
        es = gtype.size
        ds = dst.type.size
        sa, sb, sd = (strides[0] // es, strides[1] // es, strides[2] // ds) if batch > 1 else (0, 0, 0)
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
        self.d_layout = _layout(dst.type, M, N, dst.nb[1] // ds if dst.ne[1] > 1 else M, batch, sd)
        self.pref = call(lt.matmul_preference_create)
        strides = tuple(strides) if batch > 1 else ()
        P = lt.MatmulPreferenceAttribute
        for attr, v in ((P.MAX_WORKSPACE_BYTES, WORKSPACE),
                        (P.MIN_ALIGNMENT_A_BYTES, _alignment([p[0] for p in ptrs], strides[:1])),
                        (P.MIN_ALIGNMENT_B_BYTES, _alignment([p[1] for p in ptrs], strides[1:2])),
                        (P.MIN_ALIGNMENT_C_BYTES, _alignment(c_ptrs or [p[2] for p in ptrs], strides[2:])),
                        (P.MIN_ALIGNMENT_D_BYTES, _alignment([p[2] for p in ptrs], strides[2:]))):
            _set(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype, self.pref, attr, v)
        layouts = (self.a_layout, self.b_layout, self.d_layout)
        weakref.finalize(self, _destroy, self.desc, layouts, self.pref)
        gemm = (self.a_layout, self.b_layout, self.d_layout, self.d_layout)
        self.algo = lt.MatmulHeuristicResult(1)
        if backend.tuned_gemm(self.desc, gemm, self.pref, self.algo.ptr):
            self.name += "+tuned"           # measured (CUDABackend(autotune=True))
        elif heuristic(self.handle, self.desc, gemm, self.pref, self.algo, 1) == 0:
            raise CudaError(f"cublasLt found no algorithm for node '{node.name}' (mul_mat {gtype.name}, "
                            f"M={M} N={N} K={K} batch={batch}{', bias' if bias is not None else ''})")
        self.alpha = np.ones(1, np.float32)
        self.beta = np.ones(1, np.float32) if c_ptrs else np.zeros(1, np.float32)
        stream = int(backend.stream.handle)
        c_ptrs = c_ptrs or [pd for _, _, pd in ptrs]
        self.calls = [(self.handle, self.desc, self.alpha.ctypes.data, pa_, self.a_layout, pb_, self.b_layout,
                       self.beta.ctypes.data, pc, self.d_layout, pd, self.d_layout, self.algo.ptr, workspace,
                       WORKSPACE, stream) for (pa_, pb_, pd), pc in zip(ptrs, c_ptrs)]

    def at(self, i: int) -> Gemm:
        """A step running only call i (the descriptors and algorithm shared; self kept alive with it)."""
        other = object.__new__(Gemm)
        other.__dict__.update(self.__dict__)
        other.calls, other._parent = [self.calls[i]], self
        return other

    def __call__(self, stream):
        for args in self.calls:
            call(lt.matmul, *args)
