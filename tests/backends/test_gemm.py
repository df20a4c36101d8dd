"""ggpy's own GEMM (backends/cpu/kernels/gemm.py) against float64 numpy: edge tiles, several row, depth and
column blocks, leading dimensions past the rows, strided B, and the rows of C past m left untouched."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from ggpy.backends.cpu.kernels import gemm as own

pytestmark = pytest.mark.skipif(not own.available(), reason="the host has neither AVX-512 nor AVX2 with FMA")


@njit(nogil=True)
def _run(c, ldc, a, lda, m, w, scratch):
    own.gemm(c.ctypes.data, ldc, a.ctypes.data, lda, m, w, scratch, False)


SHAPES = [(1, 1, 1), (5, 3, 2), (own.MR, own.NR, 16), (own.MR + 1, own.NR - 1, 7), (100, 37, 500),
          (own.MC * 2 + 5, 129, own.KC * 2 + 9), (7, 2000, 700), (4096 // 8, 256, 320), (3, 5, 0)]


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda v: str(v))
def test_gemm_matches_float64(m, n, k):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    lda, ldc = m + int(rng.integers(0, 5)), m + int(rng.integers(0, 5))
    a = rng.standard_normal(lda * max(k, 1)).astype(np.float32)
    w = rng.standard_normal((n, k + 3)).astype(np.float32)[:, 1:k + 1]       # strided rows
    c = rng.standard_normal(ldc * n).astype(np.float32)
    before = c.copy()
    scratch = np.full(own.scratch_floats(m, n, k), np.nan, np.float32)
    _run(c, ldc, a, lda, m, w, scratch)
    ref = a[:lda * k].reshape(k, lda).T[:m].astype(np.float64) @ w.astype(np.float64).T
    got = c.reshape(n, ldc).T
    np.testing.assert_allclose(got[:m], ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()) * max(1, k) ** 0.5)
    np.testing.assert_array_equal(got[m:], before.reshape(n, ldc).T[m:])


def test_transposed_weights_view():
    """B given as a transposed (non-contiguous) view reads the same as its contiguous copy."""
    rng = np.random.default_rng(5)
    m, n, k = 77, 19, 45
    a = rng.standard_normal(m * k).astype(np.float32)
    wt = rng.standard_normal((k, n)).astype(np.float32)
    c1, c2 = np.empty(m * n, np.float32), np.empty(m * n, np.float32)
    scratch = np.empty(own.scratch_floats(m, n, k), np.float32)
    _run(c1, m, a, m, m, wt.T, scratch)
    _run(c2, m, a, m, m, np.ascontiguousarray(wt.T), scratch)
    np.testing.assert_array_equal(c1, c2)


AVX2_TILE_CHECK = """
import llvmlite.binding as llvm
real = llvm.get_host_cpu_features
def without_avx512():
    features = real()
    for name in list(features):
        if name.startswith("avx512"):
            features[name] = False
    return features
llvm.get_host_cpu_features = without_avx512
import numpy as np
from numba import njit
from ggpy.backends.cpu.kernels import gemm as own
assert (own.MV, own.NR, own.W) == (2, 6, 8), (own.MV, own.NR, own.W)

@njit
def run(c, ldc, a, lda, m, w, scratch):
    own.gemm(c.ctypes.data, ldc, a.ctypes.data, lda, m, w, scratch, False)

rng = np.random.default_rng(1)
for m, n, k in [(1, 1, 1), (17, 7, 5), (own.MC + 21, 13, own.KC + 3)]:
    a = rng.standard_normal(m * k).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    c = np.empty(m * n, np.float32)
    run(c, m, a, m, m, w, np.empty(own.scratch_floats(m, n, k), np.float32))
    ref = a.reshape(k, m).T.astype(np.float64) @ w.astype(np.float64).T
    err = np.abs(c.reshape(n, m).T - ref).max() / np.abs(ref).max()
    assert err < 1e-5, (m, n, k, err)
print("ok")
"""


def test_avx2_tile(tmp_path):
    """The AVX2 tile (2 x 6 ymm), picked where the host reports no AVX-512, computes the same products (run in
    a fresh process with its own numba cache, the host's AVX-512 hidden from the tile choice)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", AVX2_TILE_CHECK], env=env, capture_output=True, text=True, check=False,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
