"""Single-threaded BLAS sgemm callable from numba kernels, so matrix products run on ggpy's own workers.

The Fortran sgemm comes from SciPy's `cython_blas` (the BLAS numpy and SciPy ship). Its address is passed
to kernels as an integer and called through an intrinsic, which keeps the kernels cacheable on disk (a
ctypes function baked into the code would not be).
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic

from .common import scalar

SGEMM_ADDRESS = get_cython_function_address("scipy.linalg.cython_blas", "sgemm")
_T, _N = 84, 78           # 'T' and 'N'


@intrinsic
def _call_sgemm(typingctx, fn, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Call the Fortran sgemm at address `fn`; every other argument is the address of its value."""
    def codegen(context, builder, sig, args):
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [ptr] * 13)
        func = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(func, [builder.inttoptr(v, ptr) for v in args[1:]])
        return context.get_dummy_value()
    return types.void(*([types.intp] * 14)), codegen


@scalar
def sgemm(fn, work, trans_a, trans_b, m, n, k, a_ptr, lda, b_ptr, ldb, c_ptr, ldc):
    """C (m x n, column-major, ldc) = op(A) @ op(B), op(X) = X^T when trans_x; pointers are ints.

    `work` is an int32 array of 10 the caller allocates once (sgemm takes every argument by address).
    """
    work[0], work[1], work[2], work[3], work[4], work[5] = m, n, k, lda, ldb, ldc
    work[6] = _T if trans_a else _N
    work[7] = _T if trans_b else _N
    f = work[8:10].view(np.float32)
    f[0], f[1] = 1.0, 0.0
    p = work.ctypes.data
    _call_sgemm(fn, p + 24, p + 28, p, p + 4, p + 8, p + 32, a_ptr, p + 12, b_ptr, p + 16, p + 36, c_ptr, p + 20)
