"""Element-type conversions the families share: `convert` (an element as another type: unchanged when the types
match, else through float32), to_f32_rows (any rows into contiguous float32: operands of the GEMMs) and
copy_transposed (a cont of a permute by tiles)."""
from numba.extending import overload

from .common import block, kernel, row_index
from .fp16 import load, store


def convert(x, dtype):
    """`x` as an element of `dtype`: unchanged when the types match, else through float32."""


@overload(convert, inline="always")
def _convert(x, dtype):
    if x == dtype.dtype:
        return lambda x, dtype: x
    return lambda x, dtype: store(load(x), dtype)


@kernel
def to_f32_rows(dst, src, ith, nth):
    """dst (float32, contiguous) = src (any element type, any strides), shapes (ne3, ne2, ne1, ne0)."""
    ne3, ne2, ne1, ne0 = src.shape
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = dst[i3, i2, i1]
        srow = src[i3, i2, i1]
        for i0 in range(ne0):
            drow[i0] = load(srow[i0])


TRANSPOSE_TILE = 16


@kernel
def copy_transposed(d, a, ith, nth):
    """d = a for arrays of one shape (A, B, J, I) where d's I and a's J are the unit-stride axes: tiles of
    16 x 16 so both the written rows and the strided reads stay in cache (a cont of a permute)."""
    na, nb, nj, ni = d.shape
    t = TRANSPOSE_TILE
    n_it = (ni + t - 1) // t
    r0, r1 = block(na * nb * n_it, ith, nth)
    for r in range(r0, r1):
        ia, ib, it = r // (nb * n_it), (r // n_it) % nb, r % n_it
        i0 = it * t
        i1 = min(ni, i0 + t)
        dp, ap = d[ia, ib], a[ia, ib]
        for j0 in range(0, nj, t):
            for j in range(j0, min(nj, j0 + t)):
                drow, arow = dp[j], ap[j]
                for i in range(i0, i1):
                    drow[i] = convert(arow[i], drow.dtype)
