"""Helpers shared by numba kernels: ggml-style work splitting."""
from numba import njit


@njit(cache=True)
def block(n, ith, nth):
    """Rows [start, end) of `n` that worker `ith` of `nth` computes (contiguous blocks, as ggml)."""
    per = (n + nth - 1) // nth
    start = min(n, per * ith)
    end = min(n, start + per)
    return start, end
