"""Helpers shared by numba kernels: the decorators, ggml-style work splitting, compile-time specialisation.

Kernels use numpy's error model: float division by zero gives inf/nan instead of a Python exception
check in every iteration, which would stop the loop from vectorising.
"""
import math

import numpy as np
from llvmlite import ir
from numba import int64, njit, prange, typeof, types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import precompile

kernel = njit(nogil=True, cache=True, error_model="numpy")
"""Decorator for a serial kernel `f(..., ith, nth)` that computes worker ith's share of the work."""

parallel_kernel = njit(parallel=True, cache=True, error_model="numpy")
"""Decorator for a function with a prange loop (run_workers runs every serial kernel through one)."""

scalar = njit(inline="always", cache=True, error_model="numpy")
"""Decorator for scalar helpers inlined into kernels (so loops calling them vectorise)."""


@scalar
def block(n, ith, nth):
    """Rows [start, end) of `n` that worker `ith` of `nth` computes (contiguous blocks, as ggml)."""
    per = (n + nth - 1) // nth
    start = min(n, per * ith)
    end = min(n, start + per)
    return start, end


@scalar
def row_index(r, ne2, ne1):
    """(i3, i2, i1) of row `r` when rows are numbered in ne order (i1 fastest)."""
    return r // (ne2 * ne1), (r // ne1) % ne2, r % ne1


STREAM_MIN_BYTES = 16 << 20
"""Outputs at least this large are written with non-temporal stores: they leave the caches anyway, and
skipping the read-for-ownership of every destination line saves a third of an elementwise op's traffic."""


@intrinsic
def stream_store(typingctx, arr, index, value):
    """arr[index] = value as a non-temporal store (index must be >= 0)."""
    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        ary = context.make_array(arrty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arrty, ary, [args[1]], wraparound=False)
        st = builder.store(context.cast(builder, args[2], sig.args[2], arrty.dtype), ptr)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return types.void(arr, index, value), codegen


def specialize(kernel_fn, *args, constants=()):
    """The compiled entry point of numba `kernel_fn` for `args`, with the arguments at positions
    `constants` (small ints: op codes) compiled in as literals, so a kernel can pick a function from a
    tuple with them (`FUNCS[op]`) and each op gets its own vectorised loop.

    Calling the entry point skips numba's per-call type dispatch; the code is cached on disk. While a CPU
    program is being bound (precompile.collecting), a signature not compiled yet is noted and a stand-in that
    compiles on its first call is returned, so that all of a program's kernels compile together.
    """
    return precompile.entry_point(kernel_fn, signature(args, constants))


def signature(args, constants=()) -> tuple:
    """numba argument types of `args`, literals at positions `constants` (a NativeFunction passes as int64)."""
    return tuple(types.int64 if isinstance(a, NativeFunction) else types.literal(a) if i in constants else typeof(a)
                 for i, a in enumerate(args))


def _call_status(context, builder, address, argtys, values):
    """Call the numba function compiled at integer `address` for argument types `argtys` (numba's calling
    convention, returning None) and return its error status to our caller when it fails."""
    fnty = context.call_conv.get_function_type(types.none, argtys)
    fn = builder.inttoptr(address, fnty.as_pointer())
    status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, values)
    with builder.if_then(status.is_error, likely=False):
        context.call_conv.return_status_propagate(builder, status)


@intrinsic
def _call_serial(typingctx, address, args, ith, nth):
    """serial(*args, ith, nth) for the compiled serial kernel whose native function is at `address` (arguments
    of the kernel's signature that are literals pass as their int value)."""
    def codegen(context, builder, sig, llargs):
        values = [builder.extract_value(llargs[1], i) for i in range(len(args.types))] + list(llargs[2:])
        _call_status(context, builder, llargs[0], list(args.types) + [ith, nth], values)
        return context.get_dummy_value()
    return types.void(address, args, ith, nth), codegen


@intrinsic
def call_native(typingctx, address, args):
    """f(*args) for the function f a kernel got as a NativeFunction argument (an int64 address); the argument
    types must give the native values f was compiled for (same dtypes and dimensions; f's literal arguments
    are passed too, as any int: their value is compiled in)."""
    def codegen(context, builder, sig, llargs):
        values = [builder.extract_value(llargs[1], i) for i in range(len(args.types))]
        _call_status(context, builder, llargs[0], list(args.types), values)
        return context.get_dummy_value()
    return types.void(address, args), codegen


@parallel_kernel
def run_workers(address, args, nth):
    """serial(*args, ith, nth) for ith in prange(nth), the serial kernel compiled at `address`.

    One driver per tuple of argument types, whatever the kernel: it calls the kernel's compiled code instead
    of inlining it, so a parallel launch costs no second compilation of the kernel (numba would compile it
    again for the prange's unsigned index and re-optimise it inside the driver: 3x the kernel's own time).
    """
    for ith in prange(nth):
        _call_serial(address, args, int64(ith), nth)


class NativeFunction:
    """A launch argument: numba function `kernel_fn` compiled for the argument types `sig`, passed to the kernel
    as the int64 address that call_native calls. A kernel calling, say, its fused activation this way is
    compiled once for all of them, each activation being a small compile of its own."""

    def __init__(self, kernel_fn, sig):
        self.kernel_fn, self.sig = kernel_fn, tuple(sig)

    def compiled(self) -> bool:
        return self.sig in self.kernel_fn.overloads

    def address(self) -> int:
        self.kernel_fn.compile(self.sig)
        return native_address(self.kernel_fn, self.sig)


def native_address(kernel_fn, sig) -> int:
    """The address of the native function of `kernel_fn` compiled for `sig` (compiled, returning None)."""
    cres = kernel_fn.overloads[sig]
    if cres.signature.return_type != types.none:
        raise TypeError(f"{kernel_fn.__name__} returns {cres.signature.return_type}: a kernel called by address returns nothing")
    address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    if not address:
        raise RuntimeError(f"{kernel_fn.__name__}: no native function {cres.fndesc.llvm_func_name} in its library")
    return address


def _as_passed(t):
    """The type run_workers passes an argument of type t as: literals as int64, arrays as layout 'A' (the
    same native value: drivers are shared by kernels whose arguments differ only in layout)."""
    if isinstance(t, types.Literal):
        return types.int64
    return t.copy(layout="A") if isinstance(t, types.Array) else t


def launch(serial, args, nth: int, constants=()):
    """A zero-argument call running `serial(*args, ith, nth)` for every ith on `nth` workers: the serial
    kernel itself when nth == 1, else run_workers calling its compiled code from numba's threads; compiled for
    exactly these arguments (`constants`: positions of op codes compiled in as literals; NativeFunction
    arguments are compiled too and passed as their addresses)."""
    natives = [a for a in args if isinstance(a, NativeFunction)]
    sig = signature(args, constants) + (types.int64, types.int64)
    driver_sig = (types.int64, types.Tuple([_as_passed(a) for a in sig[:-2]]), types.int64)
    ready = (sig in serial.overloads and all(f.compiled() for f in natives)
             and (nth == 1 or driver_sig in run_workers.overloads))
    if not ready and precompile.collecting_now():
        precompile.note(serial, sig)
        for f in natives:
            precompile.note(f.kernel_fn, f.sig)
        if nth > 1:
            precompile.note(run_workers, driver_sig)
        return precompile.deferred(lambda: launch(serial, args, nth, constants))
    run = precompile.entry_point(serial, sig)
    args = tuple(f.address() if isinstance(f, NativeFunction) else f for f in args)
    if nth == 1:
        return lambda: run(*args, 0, 1)
    address = native_address(serial, sig)
    drive = precompile.entry_point(run_workers, driver_sig)
    return lambda: drive(address, args, nth)


def flat(arr):
    """A 1-d view of a C-contiguous array, or None."""
    return arr.reshape(-1) if arr.flags.c_contiguous else None


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """float32 ALiBi slope of each head (dimension 2), as ggml: 1 for every head when max_bias <= 0."""
    if max_bias <= 0:
        return np.ones(n_head, np.float32)
    n_log2 = 2 ** int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)],
                    np.float32)
