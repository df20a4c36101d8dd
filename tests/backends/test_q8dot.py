"""The CPU mul_mat implementation q8 (quantized weights times activations rounded to 8-bit blocks, integer dot
products): its values against float64 products of gguf's dequantized weights with the activations rounded as ggml's
q8_1 rounds them, its error against the exact product, its choice and forcing beside the exact `dot`, the
vpdpbusd form of its products for AVX512-VNNI hosts, and the AVX-512 mat-vec (dot_q8_row4x32) beside the per-block
dot products."""
import dataclasses
import re

import gguf
import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from llvmlite import ir

import ggpy
from ggpy.backends.cpu import kernels  # noqa: F401 - registers the kernels
from ggpy.backends.cpu.kernels import q8dot
from ggpy.backends.cpu.kernels.quants import INT8, NIBBLE, NIBBLE_WORD_BIT
from ggpy.backends.cpu.registry import KERNELS
from ggpy.test_backend_ops import run_case
from ggpy.test_backend_ops.cases.matmul import QUANT_NMSE, quant_cases
from ggpy.types import Q6_K

pytestmark = pytest.mark.skipif(not q8dot.AVAILABLE, reason="q8 needs an x86 host with AVX2")


def _random_rows(rng, t, k, m) -> np.ndarray:
    """m rows of K values of type t as random bytes (every quant and sign pattern, Q8_0's -128 included) whose f16
    scale fields hold small finite values."""
    raw = rng.integers(0, 256, (m, t.row_bytes(k)), dtype=np.uint8)
    blocks = raw.reshape(-1, t.size)
    at = slice(t.size - 2, t.size) if t == Q6_K else slice(0, 4)
    blocks[:, at] = rng.uniform(2 ** -8, 2 ** -7, (len(blocks), (at.stop - at.start) // 2)).astype(np.float16).view(np.uint8)
    return raw


def _q8_rounded(x: np.ndarray) -> np.ndarray:
    """x's rows as the activation blocks hold them: per 32 values d = max|x| / 127, d * round(x / d) (float64)."""
    blocks = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    d = np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0)
    q = np.rint(blocks * inv)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def _product(t, raw, x, backend):
    k, m, n = x.shape[1], raw.shape[0], x.shape[0]
    ctx = ggpy.Context()
    a, b = ctx.new_tensor(t, (k, m)).set_name("a"), ctx.new_tensor(ggpy.F32, (k, n)).set_name("x")
    out = ggpy.mul_mat(a, b).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(raw)
    b.set(x.reshape(b.shape))
    backend.compute(graph)
    return out.numpy().reshape(n, m), [r.kernel for r in plan.timeline if r.op == "mul_mat"][0]


@pytest.mark.parametrize("threads, n", [(1, 1), (2, 1), (2, 3), (3, 8), (2, 13)])
@pytest.mark.parametrize("t", q8dot.Q8_TYPES, ids=lambda t: t.name)
def test_q8_equals_the_product_with_rounded_activations(t, threads, n):
    rng = np.random.default_rng(7)
    k, m = 3 * 256, 67
    raw = _random_rows(rng, t, k, m)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0, :32] = 0.0                                          # an all-zero block: d = 0
    got, kernel = _product(t, raw, x, ggpy.CPUBackend(n_threads=threads, force={"mul_mat": "q8"}))
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.ggml_id)).astype(np.float64)
    ref = _q8_rounded(x) @ w.T
    exact = x.astype(np.float64) @ w.T
    assert kernel == f"q8_{t.name}"
    assert np.sum((got - ref) ** 2) / np.sum(ref ** 2) < 1e-11
    assert 1e-7 < np.sum((got - exact) ** 2) / np.sum(exact ** 2) < 1e-4     # the activations' rounding, no more


@pytest.mark.parametrize("t", [ggpy.Q4_0, ggpy.Q4_1, ggpy.Q5_0, ggpy.Q5_1], ids=lambda t: t.name)
def test_register_tiles_hold_the_largest_block_sums(t):
    """The nibble types' tiles add four columns' products in 16 bits: every quant at its largest (15, or 31 with the
    fifth bit) times activations all at +-127 (constant rows) is the largest sum they hold; 12 columns: a tile of 8
    and one of 4."""
    rng = np.random.default_rng(3)
    k, m, n = 2 * 256, 40, 12
    raw = _random_rows(rng, t, k, m)
    blocks = raw.reshape(-1, t.size)
    blocks[:, 4 if t in (ggpy.Q4_1, ggpy.Q5_1) else 2:] = 255           # the quants (and Q5's fifth bits) all ones
    x = np.repeat(rng.choice([-3.0, 2.5], n)[:, None], k, axis=1).astype(np.float32)
    got, kernel = _product(t, raw, x, ggpy.CPUBackend(n_threads=1, force={"mul_mat": "q8"}))
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.ggml_id)).astype(np.float64)
    ref = _q8_rounded(x) @ w.T
    assert kernel == f"q8_{t.name}" and np.abs(w).max() > 0
    assert np.sum((got - ref) ** 2) / np.sum(ref ** 2) < 1e-11


def test_q8_is_chosen_for_few_columns_and_dot_stays_forcible():
    """q8 up to 48 rows of b for the 32-block types (register tiles), up to 8 for the K-quants (a dot product per
    row and column); more by dequantized panels (gemm)."""
    ctx = ggpy.Context()
    shapes = [(ggpy.Q4_1, 1), (ggpy.Q4_1, 48), (ggpy.Q4_1, 49), (ggpy.Q4_K, 8), (ggpy.Q4_K, 9)]
    nodes = [ggpy.mul_mat(ctx.new_tensor(t, (256, 64)), ctx.new_tensor(ggpy.F32, (256, n))) for t, n in shapes]
    every = lambda impl: [f"{impl}_{t.name}" for t, _ in shapes]        # noqa: E731
    expected = {None: ["q8_q4_1", "q8_q4_1", "gemm_q4_1", "q8_q4_k", "gemm_q4_k"], "dot": every("dot"),
                "q8": every("q8"), "blas": every("blas")}
    for impl, names in expected.items():
        backend = ggpy.CPUBackend(n_threads=2, force={} if impl is None else {"mul_mat": impl})
        graph = ggpy.Graph()
        for node in nodes:
            graph.build_forward_expand(node)
        plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
        assert [r.kernel for r in plan.timeline if r.op == "mul_mat"] == names
    assert {"dot", "q8"} <= set(KERNELS["mul_mat"].candidates(nodes[0], ggpy.CPUBackend(n_threads=2)))


def test_q8_is_for_quantized_weights_only():
    ctx = ggpy.Context()
    y = ggpy.mul_mat(ctx.new_tensor(ggpy.F32, (64, 8)), ctx.new_tensor(ggpy.F32, (64, 2)))
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot run as q8: q8 takes a quantized a only"):
        ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=1, force={"mul_mat": "q8"})).alloc_graph(
            ggpy.Graph().build_forward_expand(y))


def test_types_without_integer_dots_run_as_dot_and_refuse_q8():
    ctx = ggpy.Context()
    y = ggpy.mul_mat(ctx.new_tensor(ggpy.IQ4_XS, (256, 8)), ctx.new_tensor(ggpy.F32, (256, 2)))
    plan = ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=1)).alloc_graph(ggpy.Graph().build_forward_expand(y))
    assert [r.kernel for r in plan.timeline if r.op == "mul_mat"] == ["dot_iq4_xs"]
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot run as q8: q8 takes q4_0, .*q6_k$"):
        ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=1, force={"mul_mat": "q8"})).alloc_graph(
            ggpy.Graph().build_forward_expand(y))


@pytest.mark.parametrize("case", [c for c in quant_cases() if "(q8|dot)" in c.kernel], ids=lambda c: c.id)
def test_dot_is_exact(case):
    """The exact path, forced, on the few-column cases that run as q8 by default."""
    case = dataclasses.replace(case, kernel=case.kernel.replace("(q8|dot)", "dot"), max_nmse=QUANT_NMSE)
    result = run_case(case, ggpy.CPUBackend(n_threads=2, force={"mul_mat": "dot"}))
    assert result.ok, f"{case.id}: {result.message}"


@pytest.mark.parametrize("vnni, expected", [(False, ("vpmaddubsw", "vpmaddwd")), (True, ("vpdpbusd",))])
def test_products_compile_to_the_integer_instructions(vnni, expected):
    """The int8 products as LLVM compiles them for an AVX512-VNNI CPU (no such CPU needed)."""
    module = ir.Module()
    v8 = ir.VectorType(ir.IntType(8), 32)
    fn = ir.Function(module, ir.FunctionType(ir.VectorType(ir.IntType(32), 8), [v8, v8]), "madd")
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.ret(q8dot._Ints(builder, vnni=vnni).madd(*fn.args))
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu="icelake-server")
    asm = machine.emit_assembly(llvm.parse_assembly(str(module)))
    assert all(f"\t{name}\t" in asm for name in expected), asm


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("t", [ggpy.Q4_1, ggpy.Q5_K, ggpy.Q8_0], ids=lambda t: t.name)
def test_fused_glu_and_residual_add_equal_the_nodes_one_by_one(t, n):
    """A feed-forward block, r + Wd . (silu(Wg . x) * (Wu . x)), by the fused q8 kernels (gate/up + SiLU*mul, product
    + residual add) and node by node (fuse=False)."""
    rng = np.random.default_rng(3)
    k, m = 512, 256
    leafs = {"wg": _random_rows(rng, t, k, m), "wu": _random_rows(rng, t, k, m), "wd": _random_rows(rng, t, m, k),
             "x": rng.standard_normal((n, k)).astype(np.float32), "r": rng.standard_normal((n, k)).astype(np.float32)}
    fused, nodes = (_feed_forward(t, leafs, k, m, n, ggpy.CPUBackend(n_threads=2, fuse=fuse)) for fuse in (True, False))
    assert np.sum((fused - nodes) ** 2) / np.sum(nodes ** 2) < 1e-12


def test_autotune_times_q8_beside_the_exact_path():
    ctx = ggpy.Context()
    node = ggpy.mul_mat(ctx.new_tensor(ggpy.Q4_K, (512, 96)), ctx.new_tensor(ggpy.F32, (512, 2)))
    backend = ggpy.CPUBackend(n_threads=2)
    winner, times = backend.measure_impls(KERNELS["mul_mat"], node, KERNELS["mul_mat"].candidates(node, backend))
    assert {"dot", "q8"} <= set(times) and all(s > 0 for s in times.values()) and winner in times


def test_register_tiles_compile_to_the_integer_instructions():
    """tile_q8 of a 32-block type as numba compiles it for this host: int8 products, the 8-column tile unrolled (a
    weight block unpacked once, eight products of it)."""
    @numba.njit
    def tiles(a, xq, xds, xt, out):
        q8dot.tile_q8_q4_1(a, 0, a.shape[0], xq, xds, xt, out)

    n, k = q8dot.TILE_COLS, 64
    tiles(np.zeros((3, 40), np.uint8), np.zeros((n, k), np.int8), np.zeros((n, 4), np.float32),
          np.zeros((4, n), np.float32), np.zeros((n, 3), np.float32))
    asm = next(iter(tiles.inspect_asm().values()))
    products = ("vpdpbusd",) if q8dot.VNNI else ("vpmaddubsw", "vpmaddwd")
    assert all(asm.count(f"\t{name}\t") >= n for name in products)


_SPECS32 = {ggpy.Q4_0: (NIBBLE, 0, 18, 0, 2, 8.0), ggpy.Q4_1: (NIBBLE, 1, 20, 0, 4, 0.0),
            ggpy.Q5_0: (NIBBLE_WORD_BIT, 0, 22, 2, 6, 16.0), ggpy.Q5_1: (NIBBLE_WORD_BIT, 1, 24, 4, 8, 0.0),
            ggpy.Q8_0: (INT8, 0, 34, 0, 2, 0.0)}
"""dot_q8_blocks32's literal arguments per 32-block type, as tile_q8_<type> passes them."""


def _row_dots(t):
    """numba functions of rows a of type t times one activation row: by dot_q8_blocks32 and by dot_q8_row4x32 (the
    activation quantized for each: pairs, and grouped over NaN scratch, which the last step's missing blocks read)."""
    mode, has_min, size, qh_at, qs_at, center = _SPECS32[t]

    @numba.njit
    def dots(a, x):
        nb = x.size // 32
        xq, xds, xg = np.zeros(x.size, np.int8), np.zeros(2 * nb, np.float32), np.full(40 * (nb + 3) // 4, np.nan, np.float32)
        q8dot.quantize_row_q8(xq, xds, x)
        q8dot.quantize_q8(1, x.ctypes.data, xg.ctypes.data, xg.ctypes.data + (nb + 3) // 4 * 128, nb)
        old, new = np.zeros(a.shape[0], np.float32), np.zeros(a.shape[0], np.float32)
        for r in range(a.shape[0]):
            old[r] = q8dot.dot_q8_blocks32(mode, has_min, a[r].ctypes.data, xq.ctypes.data, xds.ctypes.data, nb, size,
                                           qh_at, qs_at, np.float32(center))
            new[r] = q8dot.dot_q8_row4x32(mode, has_min, a[r].ctypes.data, xg.ctypes.data, nb, size, qh_at, qs_at,
                                          np.float32(center))
        return old, new
    return dots


def _nmse(got, ref) -> float:
    return float(np.sum((got - ref) ** 2) / np.sum(ref ** 2))


rows4 = pytest.mark.skipif(not q8dot.ROWS4, reason="dot_q8_row4x32 needs AVX512-BW, -VBMI and -VNNI")


@rows4
@pytest.mark.parametrize("k", [32, 64, 96, 160, 224, 576, 1536, 2048])
@pytest.mark.parametrize("t", q8dot.Q8_TILED, ids=lambda t: t.name)
def test_row4x32_equals_the_rounded_product_and_dot_q8_blocks32(t, k):
    """The AVX-512 mat-vec, K/32 = 1 .. 64 blocks (the last step with 1, 2, 3 or 4 of them), against the float64 product
    of the dequantized rows with the rounded activations and against the per-block dot product (today's path on
    other hosts and for the columns past the register tiles)."""
    rng = np.random.default_rng()
    raw = _random_rows(rng, t, k, 37)
    x = rng.standard_normal(k).astype(np.float32)
    x[32:64] = 0.0                                           # an all-zero block (d = 0) where there are two
    old, new = _row_dots(t)(raw, x)
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.ggml_id)).astype(np.float64)
    ref = _q8_rounded(x[None])[0] @ w.T
    assert _nmse(new, ref) < 1e-11 and _nmse(old, ref) < 1e-11
    assert _nmse(new, old) < 1e-12


@rows4
@pytest.mark.parametrize("k", [32, 576, 2048])
@pytest.mark.parametrize("t", q8dot.Q8_TILED, ids=lambda t: t.name)
def test_q8_mat_vec_runs_four_blocks_a_step(t, k):
    """mul_mat q8 of one row of x (dot_q8_row4x32) with a K/32 that is not a multiple of 4, on two workers."""
    rng = np.random.default_rng()
    raw = _random_rows(rng, t, k, 67)
    x = rng.standard_normal((1, k)).astype(np.float32)
    got, kernel = _product(t, raw, x, ggpy.CPUBackend(n_threads=2, force={"mul_mat": "q8"}))
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.ggml_id)).astype(np.float64)
    assert kernel == f"q8_{t.name}" and _nmse(got, _q8_rounded(x) @ w.T) < 1e-11


def _feed_forward(t, leafs, k, m, n, backend=None):
    """r + Wd . (silu(Wg . x) * (Wu . x)) on the first n rows of x and r: by the fused q8 kernels (the default backend,
    or one with fuse) or node by node (fuse=False)."""
    backend = backend or ggpy.CPUBackend(n_threads=2)
    ctx = ggpy.Context()
    ts = {name: ctx.new_tensor(t, ne).set_name(name) for name, ne in (("wg", (k, m)), ("wu", (k, m)), ("wd", (m, k)))}
    ts.update({name: ctx.new_tensor(ggpy.F32, (k, n)).set_name(name) for name in ("x", "r")})
    h = ggpy.mul(ggpy.silu(ggpy.mul_mat(ts["wg"], ts["x"])), ggpy.mul_mat(ts["wu"], ts["x"]))
    out = ggpy.add(ts["r"], ggpy.mul_mat(ts["wd"], h)).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for name, tensor in ts.items():
        tensor.set(leafs[name] if tensor.type.quantized else leafs[name][:n].reshape(tensor.shape))
    backend.compute(graph)
    assert [step.name for step in backend.program(graph)] == (
        [f"q8_{t.name}+glu_silu", f"q8_{t.name}+add"] if backend.fuse else
        [f"q8_{t.name}", "silu", f"q8_{t.name}", "mul", f"q8_{t.name}", "add"])
    return out.numpy().reshape(n, k).copy()


@rows4
@pytest.mark.parametrize("t", q8dot.Q8_TILED, ids=lambda t: t.name)
def test_fused_mat_vecs_equal_the_per_block_dots(t):
    """The fused glu and residual add kernels on one row of x (dot_q8_row4x32) against the same row among three (a
    dot_q8_blocks32 per row and column); K = 576 and 224: 18 and 7 blocks."""
    rng = np.random.default_rng()
    k, m = 576, 224
    leafs = {"wg": _random_rows(rng, t, k, m), "wu": _random_rows(rng, t, k, m), "wd": _random_rows(rng, t, m, k),
             "x": rng.standard_normal((3, k)).astype(np.float32), "r": rng.standard_normal((3, k)).astype(np.float32)}
    one, three = _feed_forward(t, leafs, k, m, 1), _feed_forward(t, leafs, k, m, 3)
    assert _nmse(one[0], three[0]) < 1e-12


@rows4
def test_row4x32_compiles_to_512_bit_integer_products():
    """tile_q8 of one column as numba compiles it for this host: two vpdpbusd on zmm registers a step, the f16
    scales converted by vcvtph2ps, the last step's blocks by masked loads (no copy)."""
    @numba.njit
    def tiles(a, xq, xds, xt, out):
        q8dot.tile_q8_q4_1(a, 0, a.shape[0], xq, xds, xt, out)

    tiles(np.zeros((3, 40), np.uint8), np.zeros((1, 64), np.int8), np.zeros((1, 4), np.float32),
          np.zeros((44, 1), np.float32), np.zeros((1, 3), np.float32))
    asm = next(iter(tiles.inspect_asm().values()))
    assert len(re.findall(r"\tvpdpbusd\t.*zmm", asm)) >= 2 and re.search(r"\tvcvtph2ps", asm) and "memcpy" not in asm
