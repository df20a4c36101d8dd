"""Single-threaded BLAS sgemm callable from numba kernels, so matrix products run on ggpy's own workers.

The Fortran sgemm comes from SciPy's `cython_blas` (the BLAS numpy and SciPy ship). Its address is passed
to kernels as an integer and called through an intrinsic, which keeps the kernels cacheable on disk (a
ctypes function baked into the code would not be).
"""
from contextlib import contextmanager

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


def _scipy_blas_controller():
    """threadpoolctl's handle on the BLAS SciPy ships, or None when SciPy shares numpy's (e.g. conda)."""
    import os

    import scipy
    from threadpoolctl import ThreadpoolController
    root = os.path.dirname(scipy.__file__)       # .../scipy; wheels keep their BLAS in .../scipy.libs
    controller = ThreadpoolController().select(user_api="blas")
    own = [lib.filepath for lib in controller.lib_controllers if lib.filepath.startswith(root)]
    return controller.select(filepath=own) if own else None


_state = {"checked": False, "own": None, "shared": None}


@contextmanager
def single_threaded_blas():
    """sgemm called from ggpy's workers must not start threads of its own.

    SciPy's own BLAS (wheels) is set to one thread and left so (checked on every entry, one cheap call):
    restoring it would wake its threads, which then spin and fight ggpy's workers. When SciPy shares
    numpy's BLAS, that library is limited for the duration of the block only, so numpy keeps its threads.
    """
    if not _state["checked"]:
        from threadpoolctl import ThreadpoolController
        _state["own"] = _scipy_blas_controller()
        if _state["own"] is None:
            _state["shared"] = ThreadpoolController().select(user_api="blas")
        _state["checked"] = True
    own = _state["own"]
    if own is not None:
        if any(lib.num_threads != 1 for lib in own.lib_controllers):
            own.limit(limits=1)
        yield
        return
    with _state["shared"].limit(limits=1):
        yield
