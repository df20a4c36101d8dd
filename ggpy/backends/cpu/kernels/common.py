"""Helpers shared by numba kernels: the decorators, ggml-style work splitting, compile-time specialisation.

Kernels use numpy's error model: float division by zero gives inf/nan instead of a Python exception
check in every iteration, which would stop the loop from vectorising.
"""
from llvmlite import ir
from numba import njit, typeof, types
from numba.core import cgutils
from numba.extending import intrinsic

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

    Calling the entry point skips numba's per-call type dispatch; the code is cached on disk.
    """
    sig = tuple(types.literal(a) if i in constants else typeof(a) for i, a in enumerate(args))
    return kernel_fn.compile(sig)


def launch(serial, par, args, nth: int, constants=()):
    """A zero-argument call running `serial(*args, ith, nth)` for every ith on `nth` workers: the serial
    kernel itself when nth == 1, else its parallel driver `par(*args, nth)`; compiled for exactly these
    arguments (`constants`: positions of op codes compiled in as literals)."""
    if nth == 1:
        run = specialize(serial, *args, 0, 1, constants=constants)
        return lambda: run(*args, 0, 1)
    run = specialize(par, *args, nth, constants=constants)
    return lambda: run(*args, nth)


def flat(arr):
    """A 1-d view of a C-contiguous array, or None."""
    return arr.reshape(-1) if arr.flags.c_contiguous else None
