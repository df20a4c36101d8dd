"""ggml's block-quantized types: tensor geometry, byte layouts checked against blocks built by hand and against
gguf.quants, the CPU kernels' implementations and thread splits, GGUF loading, and the refusals."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import ggpy
from ggpy.backends.cuda import kernels as cuda_kernels  # noqa: F401 - registers the CUDA entries (no GPU needed)
from ggpy.backends.cuda.registry import KERNELS as CUDA_KERNELS
from ggpy.test_backend_ops.cases.util import random_blocks
from ggpy.types import Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, QUANT_TYPES

GG = {t: gguf.GGMLQuantizationType(t.ggml_id) for t in QUANT_TYPES}


def _half(v) -> list:
    return list(np.array([v], np.float16).view(np.uint8))


def _run(build, leafs: dict, backend):
    """Evaluate build(ctx) -> output with leafs {name: value} set; returns the output's values."""
    ctx = ggpy.Context()
    out = build(ctx).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for t in graph.leafs:
        t.set(leafs[t.name] if t.type.quantized else leafs[t.name].reshape(t.shape))
    backend.compute(graph)
    return out.numpy()


def _dequantized_by_ggpy(type_, raw: np.ndarray, backend) -> np.ndarray:
    """The rows of `raw` (uint8 (rows, bytes)) dequantized by ggpy's get_rows."""
    rows, ne0 = raw.shape[0], raw.shape[1] // type_.size * type_.block

    def build(ctx):
        a = ctx.new_tensor(type_, (ne0, rows)).set_name("a")
        return ggpy.get_rows(a, ctx.new_tensor(ggpy.I32, (rows,)).set_name("i"))
    return _run(build, {"a": raw, "i": np.arange(rows, dtype=np.int32)}, backend).reshape(rows, ne0)


@pytest.fixture(scope="module")
def cpu():
    return ggpy.CPUBackend(n_threads=2)


# -- geometry ------------------------------------------------------------------------------------------------

def test_types_keep_ggml_ids_block_sizes_and_strides():
    expected = {Q4_0: (2, 32, 18), Q4_1: (3, 32, 20), Q5_0: (6, 32, 22), Q5_1: (7, 32, 24), Q8_0: (8, 32, 34),
                Q4_K: (12, 256, 144), Q5_K: (13, 256, 176), Q6_K: (14, 256, 210)}
    for t, (gid, block, size) in expected.items():
        assert (t.ggml_id, t.block, t.size) == (gid, block, size)
        assert gguf.GGML_QUANT_SIZES[GG[t]] == (block, size)
        assert getattr(ggpy, t.name.upper()) is t
    a = ggpy.Context().new_tensor(Q4_K, (512, 3, 2))
    assert a.nb == (144, 288, 864, 1728) and a.nbytes == 1728 and a.is_contiguous()
    rows = ggpy.view_2d(a, 512, 2, a.nb[1], a.nb[1])
    assert rows.nbytes == 576 and rows.view_offs == 288


def test_set_and_numpy_keep_the_blocks_bytes(cpu):
    raw = random_blocks(np.random.default_rng(1), Q5_1, (64, 3, 1, 1))
    ctx = ggpy.Context()
    t = ctx.new_tensor(Q5_1, (64, 3))
    ggpy.alloc_ctx_tensors(ctx, cpu)
    t.set(raw)
    assert t.numpy().shape == (3, 48) and np.array_equal(t.numpy(), raw.reshape(3, 48))
    with pytest.raises(ggpy.TypeMismatchError, match=r"q5_1 ne=\(64, 3, 1, 1\): set\(\) expects its blocks as a "
                                                     r"uint8 array of shape \(1, 1, 3, 48\), got float64"):
        t.set(np.zeros((3, 64)))


# -- byte layouts --------------------------------------------------------------------------------------------

def _q4_0_block(d, q):
    """q: 32 ints 0..15; byte j holds element j in its low nibble, element j + 16 in its high one."""
    return _half(d) + [q[j] | q[j + 16] << 4 for j in range(16)]


def _k_scales(sc, m):
    """ggml's 12 bytes of eight 6-bit scales and mins: j < 4 in the low 6 bits of bytes j (scale) and j + 4 (min);
    j >= 4 split: low 4 bits in byte j + 4 (scale low nibble, min high nibble), high 2 bits in the top bits of bytes
    j - 4 (scale) and j (min)."""
    out = [0] * 12
    for j in range(8):
        if j < 4:
            out[j] |= sc[j]
            out[j + 4] |= m[j]
        else:
            out[j + 4] |= (sc[j] & 15) | (m[j] & 15) << 4
            out[j - 4] |= (sc[j] >> 4) << 6
            out[j] |= (m[j] >> 4) << 6
    return out


def _q4_k_block(d, dmin, sc, m, q):
    """q: 256 ints 0..15; the 64 values of pair p (sub-blocks 2p, 2p + 1) in the 32 bytes at 32 p, low then high."""
    qs = [q[64 * p + j] | q[64 * p + 32 + j] << 4 for p in range(4) for j in range(32)]
    return _half(d) + _half(dmin) + _k_scales(sc, m) + qs


def _q6_k_block(d, sc, q):
    """q: 256 ints 0..63; per half n: value 32k + l of the half from nibble k // 2 of ql[64n + l + 32 (k % 2)] and
    bits 2k, 2k + 1 of qh[32n + l]; scale sc[8n + 2k + l // 16]."""
    ql, qh = [0] * 128, [0] * 64
    for n in range(2):
        for k in range(4):
            for j in range(32):
                v = q[128 * n + 32 * k + j]
                ql[64 * n + j + 32 * (k % 2)] |= (v & 15) << (4 * (k // 2))
                qh[32 * n + j] |= (v >> 4) << (2 * k)
    return ql + qh + list(np.array(sc, np.int8).view(np.uint8)) + _half(d)


def test_layouts_match_blocks_built_by_hand(cpu):
    rng = np.random.default_rng(2)
    q = rng.integers(0, 16, 32)
    got = _dequantized_by_ggpy(Q4_0, np.array([_q4_0_block(0.5, q)], np.uint8), cpu)
    assert np.array_equal(got[0], 0.5 * (q - 8))

    s8 = rng.integers(-128, 128, 32)
    got = _dequantized_by_ggpy(Q8_0, np.array([_half(0.25) + list(s8.astype(np.int8).view(np.uint8))], np.uint8), cpu)
    assert np.array_equal(got[0], 0.25 * s8)

    sc, m, q = rng.integers(0, 64, 8), rng.integers(0, 64, 8), rng.integers(0, 16, 256)
    got = _dequantized_by_ggpy(Q4_K, np.array([_q4_k_block(2.0 ** -6, 2.0 ** -7, sc, m, q)], np.uint8), cpu)
    want = np.repeat(sc, 32) * q * 2.0 ** -6 - np.repeat(m, 32) * 2.0 ** -7
    assert np.array_equal(got[0], want)

    sc, q = rng.integers(-128, 128, 16), rng.integers(0, 64, 256)
    got = _dequantized_by_ggpy(Q6_K, np.array([_q6_k_block(2.0 ** -8, sc, q)], np.uint8), cpu)
    assert np.array_equal(got[0], 2.0 ** -8 * np.repeat(sc, 16) * (q - 32))


def _swapped_nibbles(raw, t):
    """Q4_0 read with element j from the high nibble and j + 16 from the low one (a layout mistake)."""
    blocks = raw.reshape(-1, t.size)
    q = np.concatenate([blocks[:, 2:] >> 4, blocks[:, 2:] & 15], axis=1).astype(np.float64) - 8
    return (blocks[:, :2].copy().view(np.float16).astype(np.float64) * q).reshape(raw.shape[0], -1)


def _q4_k_scales_unsplit(raw, t):
    """Q4_K read with every 6-bit scale and min taken as j < 4 takes them (the split of j >= 4 ignored)."""
    blocks = raw.reshape(-1, t.size)
    d, dmin = (blocks[:, i:i + 2].copy().view(np.float16).astype(np.float64) for i in (0, 2))
    sc = np.concatenate([blocks[:, 4:8] & 63, blocks[:, 12:16] & 63], axis=1)
    m = np.concatenate([blocks[:, 8:12] & 63, blocks[:, 12:16] >> 2], axis=1)
    qs = blocks[:, 16:].reshape(-1, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)
    return (d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * m[:, :, None]).reshape(raw.shape[0], -1)


def _q6_k_scale_per_32(raw, t):
    """Q6_K read with one scale per 32 values instead of per 16 (a wrong scale index)."""
    ref = gguf.quants.dequantize(raw, GG[t]).astype(np.float64).reshape(-1, 16, 16)
    blocks = raw.reshape(-1, t.size)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float64)
    right = sc[:, :, None]
    wrong = np.repeat(sc[:, ::2], 2, axis=1)[:, :, None]
    return (ref / np.where(right == 0, 1, right) * wrong).reshape(raw.shape[0], -1)


@pytest.mark.parametrize("t, mistake", [(Q4_0, _swapped_nibbles), (Q4_K, _q4_k_scales_unsplit),
                                        (Q6_K, _q6_k_scale_per_32)])
def test_format_mistakes_would_fail(cpu, t, mistake):
    """ggpy's values equal gguf.quants' exactly and are far from a plausible misreading of the same bytes, so the
    comparisons of the op tests (nmse <= 1e-9) catch such a mistake."""
    raw = random_blocks(np.random.default_rng(3), t, (2 * t.block, 4, 1, 1)).reshape(4, -1)
    got = _dequantized_by_ggpy(t, raw, cpu)
    ref = gguf.quants.dequantize(raw, GG[t]).astype(np.float64)
    assert np.array_equal(got, ref)
    wrong = mistake(raw, t)
    assert np.sum((wrong - ref) ** 2) / np.sum(ref ** 2) > 1e-3


# -- kernels ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl, n", [("dot", 1), ("dot", 3), ("dot", 20), ("blas", 5), ("blas", 40), ("gemm", 40)])
@pytest.mark.parametrize("threads", [1, 2])
def test_mul_mat_implementations_and_thread_splits(impl, n, threads):
    rng = np.random.default_rng(4)
    t = Q5_K if impl == "gemm" else Q4_1
    k, m = 2 * t.block, 70
    raw = random_blocks(rng, t, (k, m, 1, 1)).reshape(m, -1)
    x = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    backend = ggpy.CPUBackend(n_threads=threads, force={"mul_mat": impl})

    def build(ctx):
        return ggpy.mul_mat(ctx.new_tensor(t, (k, m)).set_name("a"), ctx.new_tensor(ggpy.F32, (k, n)).set_name("x"))
    got = _run(build, {"a": raw, "x": x}, backend)
    ref = x.astype(np.float64) @ gguf.quants.dequantize(raw, GG[t]).astype(np.float64).T
    assert np.sum((got - ref) ** 2) / np.sum(ref ** 2) < 1e-11


def test_dot_is_for_quantized_weights_only():
    ctx = ggpy.Context()
    y = ggpy.mul_mat(ctx.new_tensor(ggpy.F32, (64, 8)), ctx.new_tensor(ggpy.F32, (64, 2)))
    graph = ggpy.Graph().build_forward_expand(y)
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot run as dot: dot takes a quantized a only"):
        ggpy.GraphAllocator(ggpy.CPUBackend(n_threads=1, force={"mul_mat": "dot"})).alloc_graph(graph)


# -- GGUF ------------------------------------------------------------------------------------------------------

def test_load_gguf_keeps_quantized_tensors_as_they_are(tmp_path, cpu):
    rng = np.random.default_rng(5)
    writer = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "test")
    stored = {}
    for t in QUANT_TYPES:
        raw = random_blocks(rng, t, (t.block * 2, 3, 1, 1)).reshape(3, -1)
        stored[f"w.{t.name}"] = raw
        writer.add_tensor(f"w.{t.name}", raw, raw_shape=raw.shape, raw_dtype=GG[t])
    writer.add_tensor("norm", np.ones(8, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = ggpy.load_gguf(tmp_path / "q.gguf", cpu)
    for t in QUANT_TYPES:
        w = model.get(f"w.{t.name}")
        assert w.type is t and w.ne == (2 * t.block, 3, 1, 1)
        assert np.array_equal(w.numpy(), stored[f"w.{t.name}"])
        got = _dequantized_by_ggpy_tensor(w, cpu)
        assert np.array_equal(got, gguf.quants.dequantize(stored[f"w.{t.name}"], GG[t]))
    dense = ggpy.load_gguf(tmp_path / "q.gguf", cpu, convert=lambda name, t: ggpy.F32 if t.quantized else None)
    assert np.array_equal(dense.get("w.q6_k").numpy(), gguf.quants.dequantize(stored["w.q6_k"], GG[Q6_K]))


def _dequantized_by_ggpy_tensor(w, backend):
    """w's rows dequantized by get_rows on `backend` (w already placed in a buffer)."""
    ctx = ggpy.Context()
    idx = ctx.new_tensor(ggpy.I32, (w.ne[1],))
    out = ggpy.get_rows(w, idx).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    idx.set(np.arange(w.ne[1], dtype=np.int32))
    backend.compute(graph)
    return out.numpy()


def test_load_gguf_refuses_a_type_it_does_not_know(tmp_path, cpu):
    writer = gguf.GGUFWriter(str(tmp_path / "q3.gguf"), "test")
    raw = np.random.default_rng(6).integers(0, 256, (2, 98), dtype=np.uint8)
    writer.add_tensor("blk.0.ffn_up.weight", raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType.IQ3_XXS)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ggpy.ModelFileError, match=r"tensor 'blk\.0\.ffn_up\.weight' in .*q3\.gguf is of GGUF type "
                                                  r"IQ3_XXS; ggpy loads F32, F16, BF16, Q4_0, .*Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS"):
        ggpy.load_gguf(tmp_path / "q3.gguf", cpu)


# -- refusals --------------------------------------------------------------------------------------------------

def test_ops_refuse_quantized_sources_at_build_time():
    ctx = ggpy.Context()
    w = ctx.new_tensor(Q8_0, (64, 4)).set_name("w")
    x = ctx.new_tensor(ggpy.F32, (64, 4))
    with pytest.raises(ggpy.TypeMismatchError, match=r"add: 'a' has type q8_0 \(ne=\(64, 4, 1, 1\)\); expected f32"):
        ggpy.add(w, x)
    with pytest.raises(ggpy.TypeMismatchError, match=r"cont: source 0 'w' has the quantized type q8_0 .* cont takes "
                                                     r"it in no quantized type; quantized tensors go into get_rows"):
        ggpy.cont(w)
    with pytest.raises(ggpy.TypeMismatchError, match=r"mul_mat: a is q8_0 .* b is f16 .* a quantized a takes an F32 b"):
        ggpy.mul_mat(w, ctx.new_tensor(ggpy.F16, (64, 2)))
    with pytest.raises(ggpy.TypeMismatchError, match=r"mul_mat: 'b' has type q8_0 .* expected f32, f16, bf16"):
        ggpy.mul_mat(x, w)
    with pytest.raises(ggpy.ShapeError, match=r"transpose: a view of q8_0 .* must keep whole blocks of 32"):
        ggpy.transpose(w)
    with pytest.raises(ggpy.TypeMismatchError, match=r"cpy: cannot quantize f32 .* into q4_k .* expected F32 into "
                                                     r"q4_0, q4_1, q5_0, q5_1, q8_0"):
        ggpy.cpy(ctx.new_tensor(ggpy.F32, (256, 2)), ctx.new_tensor(Q4_K, (256, 2)))
    with pytest.raises(ggpy.TypeMismatchError, match=r"cast: cannot quantize f16"):
        ggpy.cast(ctx.new_tensor(ggpy.F16, (64, 2)), Q8_0)
    with pytest.raises(ggpy.ShapeError, match=r"a q5_0 tensor needs ne\[0\] to be a multiple of its block of 32"):
        ctx.new_tensor(Q5_0, (48, 2))


def test_cuda_takes_every_quantized_node():
    """No GPU needed: the CUDA entries accept get_rows, mul_mat (few columns: the integer dot-product kernel, b's q8_1
    copy in its shared memory here; up to 16 its batch kernel; more: a cuBLASLt GEMM whose scratch holds the F16 copies
    of a and b) and copies into the quantized types ggpy writes, and every kernel they name is in a CUDA source file."""
    from ggpy.backends.cuda.kernels.matmul import temp_size
    from ggpy.backends.cuda.sources import index
    from ggpy.backends.cuda.cublas import MISSING, WORKSPACE
    from ggpy.ops.layout import QUANTIZE_TO
    kernels = index()
    for t in QUANT_TYPES:
        ctx = ggpy.Context()
        w = ctx.new_tensor(t, (512, 48))
        few, batch, many = (ggpy.mul_mat(w, ctx.new_tensor(ggpy.F32, (512, n))) for n in (3, 16, 17))
        nodes = [few, batch, many, ggpy.get_rows(w, ctx.new_tensor(ggpy.I32, (5,)))]
        if t in QUANTIZE_TO:
            nodes.append(ggpy.cpy(ctx.new_tensor(ggpy.F32, (512, 4)), ctx.new_tensor(t, (512, 4))))
        for node in nodes:
            entry = CUDA_KERNELS[node.op]
            if node is many and MISSING is not None:          # the GEMM needs nvmath-python's cuBLASLt bindings
                assert "nvmath" in entry.refusal(node)
                continue
            assert entry.refusal(node) is None, (t, node.op, entry.refusal(node))
            name = entry.kernel_name(node, entry.choose(node, None) if entry.impls else None)
            assert name.startswith("cublaslt") or name in kernels, (t, node.op, name)
        mul_mat = CUDA_KERNELS["mul_mat"]
        assert mul_mat.choose(few, None) == mul_mat.choose(batch, None) == "mmvq"
        assert mul_mat.choose(many, None) == "cublaslt" and mul_mat.kernel_name(batch, "mmvq") == f"mmvq_b_{t.name}"
        assert mul_mat.kernel_name(few, "mmv") == f"mmv_{t.name}_f32" and temp_size(few, "mmv", None) == 0
        assert mul_mat.kernel_name(few, "mmvq") == f"mmvq_{t.name}" and temp_size(few, "mmvq", None) == 0    # mmvq_s
        if MISSING is None:
            assert temp_size(many, "cublaslt", None) >= WORKSPACE + 2 * 512 * (48 + 17)


def test_cuda_scheduler_runs_quantized_nodes_on_the_gpu(cuda_backend):
    """With a GPU: a graph mixing quantized weights and float ops plans and runs on CUDA, before the CPU, and gives
    the CPU's results."""
    cuda = cuda_backend
    rng = np.random.default_rng(7)
    values = {"w": random_blocks(rng, Q4_K, (512, 48, 1, 1)), "e": random_blocks(rng, Q8_0, (512, 10, 1, 1)),
              "i": np.array([3, 1, 4, 1, 5], np.int32)}

    def build(ctx):
        w, e = ctx.new_tensor(Q4_K, (512, 48)).set_name("w"), ctx.new_tensor(Q8_0, (512, 10)).set_name("e")
        x = ggpy.get_rows(e, ctx.new_tensor(ggpy.I32, (5,)).set_name("i"))
        return ggpy.soft_max(ggpy.mul_mat(w, ggpy.scale(x, 0.5)))

    want = _run(build, values, ggpy.CPUBackend(n_threads=2))
    ctx = ggpy.Context()
    out = build(ctx).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    sched = ggpy.Scheduler([cuda, ggpy.CPUBackend(n_threads=2)])
    sched.alloc_graph(graph)
    for t in graph.leafs:
        t.set(values[t.name])
    sched.compute(graph)
    placed = {n.op: sp.backend.name for sp in sched.splits for n in sp.nodes}
    assert all(name.startswith("cuda") for name in placed.values()), placed
    assert np.allclose(out.numpy(), want, rtol=1e-5, atol=1e-7)
