"""Q2_K, Q3_K, IQ4_NL and IQ4_XS: ggml's block layouts (sizes and ids as gguf's), values equal to gguf.quants'
dequantization on random blocks (every bit pattern, finite scales) through get_rows and the exact mul_mat, and far
from plausible misreadings of the same bytes. Their op cases (get_rows, mul_mat, mmvq on CUDA) are test-backend-ops'
(cases/layout.py, cases/matmul.py iterate over every quantized type); llama.cpp's files of these types:
tests/models/test_llama_low_bits.py."""
import gguf
import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.cases.util import random_blocks
from ggpy.types import IQ4_NL, IQ4_XS, KVALUES_IQ4NL, Q2_K, Q3_K

TYPES = (Q2_K, Q3_K, IQ4_NL, IQ4_XS)
GG = {t: gguf.GGMLQuantizationType(t.ggml_id) for t in TYPES}


def _run(build, leafs: dict, backend) -> np.ndarray:
    ctx = ggpy.Context()
    out = build(ctx)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for t in graph.leafs:
        t.set(leafs[t.name])
    backend.compute(graph)
    return out.numpy()


def _dequantized(t, raw: np.ndarray, backend) -> np.ndarray:
    """raw's rows (uint8 (rows, bytes)) dequantized by ggpy's get_rows."""
    rows, ne0 = raw.shape[0], raw.shape[1] // t.size * t.block

    def build(ctx):
        a = ctx.new_tensor(t, (ne0, rows)).set_name("a")
        return ggpy.get_rows(a, ctx.new_tensor(ggpy.I32, (rows,)).set_name("i"))
    return _run(build, {"a": raw, "i": np.arange(rows, dtype=np.int32)[::-1].copy()}, backend)[::-1]


def _reference(t, raw: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(raw, GG[t]).astype(np.float64)


def _nibbles_swapped(blocks: np.ndarray, lo: int, hi: int) -> np.ndarray:
    out = blocks.copy()
    out[:, lo:hi] = (blocks[:, lo:hi] >> 4) | (blocks[:, lo:hi] << 4)
    return out


def _misread(t, raw: np.ndarray) -> np.ndarray:
    """The values of a plausible misreading of raw: Q2_K's scale and min nibbles swapped, Q3_K's hmask bit meaning
    "minus 4" (ggml: its absence), IQ4_NL's nibble order swapped, IQ4_XS's scales without their high bits."""
    blocks = raw.reshape(-1, t.size).copy()
    if t == Q2_K:
        blocks = _nibbles_swapped(blocks, 0, 16)
    elif t == Q3_K:
        blocks[:, :32] ^= 0xFF
    elif t == IQ4_NL:
        blocks = _nibbles_swapped(blocks, 2, 18)
    else:
        blocks[:, 2:4] = 0
    return _reference(t, blocks.reshape(raw.shape))


@pytest.fixture(scope="module")
def cpu():
    return ggpy.CPUBackend(n_threads=2)


def test_layouts_are_ggmls():
    for t, (gid, block, size) in {Q2_K: (10, 256, 84), Q3_K: (11, 256, 110), IQ4_NL: (20, 32, 18),
                                  IQ4_XS: (23, 256, 136)}.items():
        assert (t.ggml_id, t.block, t.size) == (gid, block, size)
        assert gguf.GGML_QUANT_SIZES[GG[t]] == (block, size)
        assert getattr(ggpy, t.name.upper()) is t and ggpy.types.type_of(t.name) is t
    assert KVALUES_IQ4NL == tuple(gguf.quants.IQ4_NL.kvalues)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_values_equal_gguf_and_not_a_misreading(cpu, t):
    rng = np.random.default_rng()
    raw = random_blocks(rng, t, (4 * 256, 9, 1, 1)).reshape(9, -1)
    got, ref = _dequantized(t, raw, cpu), _reference(t, raw)
    assert np.array_equal(got, ref)
    wrong = _misread(t, raw)
    assert np.sum((wrong - ref) ** 2) / np.sum(ref ** 2) > 1e-3


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("impl, n", [("dot", 1), ("dot", 5), ("gemm", 40)])
def test_mul_mat_equals_float64_on_gguf_values(t, impl, n):
    """The exact paths: dot products over groups of 16 (one or a few rows of x), dequantized panels (many)."""
    rng = np.random.default_rng()
    k, m = 2 * 256, 37
    raw = random_blocks(rng, t, (k, m, 1, 1)).reshape(m, -1)
    x = rng.uniform(-1, 1, (n, k)).astype(np.float32)

    def build(ctx):
        return ggpy.mul_mat(ctx.new_tensor(t, (k, m)).set_name("a"), ctx.new_tensor(ggpy.F32, (k, n)).set_name("x"))
    got = _run(build, {"a": raw, "x": x.reshape(1, 1, n, k)}, ggpy.CPUBackend(n_threads=2, force={"mul_mat": impl}))
    ref = x.astype(np.float64) @ _reference(t, raw).T
    assert np.sum((got - ref) ** 2) / np.sum(ref ** 2) < 1e-11
