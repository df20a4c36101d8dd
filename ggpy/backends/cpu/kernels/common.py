"""Helpers shared by numba kernels: the decorators, ggml-style work splitting, compile-time specialisation.

Kernels use numpy's error model: float division by zero gives inf/nan instead of a Python exception
check in every iteration, which would stop the loop from vectorising.
"""
from llvmlite import ir
from numba import int64, njit, prange, typeof, types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import precompile

kernel = njit(nogil=True, cache=True, error_model="numpy")
"""Decorator for a serial kernel `f(..., ith, nth)` that computes worker ith's share of the work."""

parallel_kernel = njit(parallel=True, cache=True, error_model="numpy")
"""Decorator for a driver that runs a serial kernel for ith in prange(nth)."""

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
    """numba argument types of `args`, literals at positions `constants`."""
    return tuple(types.literal(a) if i in constants else typeof(a) for i, a in enumerate(args))


@intrinsic
def _call_serial(typingctx, address, args, ith, nth):
    """serial(*args, ith, nth) for the compiled serial kernel whose native function is at `address` (numba's
    calling convention; arguments of the kernel's signature that are literals pass as their int value),
    returning its error status to the caller."""
    argtys = list(args.types) + [ith, nth]

    def codegen(context, builder, sig, llargs):
        fnty = context.call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        values = [builder.extract_value(llargs[1], i) for i in range(len(args.types))] + list(llargs[2:])
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, values)
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()
    return types.void(address, args, ith, nth), codegen


@parallel_kernel
def run_workers(address, args, nth):
    """serial(*args, ith, nth) for ith in prange(nth), the serial kernel compiled at `address`.

    One driver per tuple of argument types, whatever the kernel: it calls the kernel's compiled code instead
    of inlining it, so a parallel launch costs no second compilation of the kernel (numba would compile it
    again for the prange's unsigned index and re-optimise it inside the driver: 3x the kernel's own time).
    """
    for ith in prange(nth):
        _call_serial(address, args, int64(ith), nth)


def native_address(kernel_fn, sig) -> int:
    """The address of the native function of `kernel_fn` compiled for `sig` (compiled, returning None)."""
    cres = kernel_fn.overloads[sig]
    if cres.signature.return_type != types.none:
        raise TypeError(f"{kernel_fn.__name__} returns {cres.signature.return_type}: a worker kernel returns nothing")
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


def launch(serial, par, args, nth: int, constants=()):
    """A zero-argument call running `serial(*args, ith, nth)` for every ith on `nth` workers: the serial
    kernel itself when nth == 1, else run_workers calling its compiled code from numba's threads; compiled for
    exactly these arguments (`constants`: positions of op codes compiled in as literals). `par` (the kernel's
    own prange driver) is not used."""
    sig = signature(args, constants) + (types.int64, types.int64)
    driver_sig = (types.int64, types.Tuple([_as_passed(a) for a in sig[:-2]]), types.int64)
    ready = sig in serial.overloads and (nth == 1 or driver_sig in run_workers.overloads)
    if not ready and precompile.collecting_now():
        precompile.note(serial, sig)
        if nth > 1:
            precompile.note(run_workers, driver_sig)
        return precompile.deferred(lambda: launch(serial, par, args, nth, constants))
    run = precompile.entry_point(serial, sig)
    if nth == 1:
        return lambda: run(*args, 0, 1)
    address = native_address(serial, sig)
    drive = precompile.entry_point(run_workers, driver_sig)
    args = tuple(args)
    return lambda: drive(address, args, nth)


def flat(arr):
    """A 1-d view of a C-contiguous array, or None."""
    return arr.reshape(-1) if arr.flags.c_contiguous else None
