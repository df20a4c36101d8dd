"""BF16 (ggml's GGML_TYPE_BF16): conversion from float32 rounds to nearest even exactly as ml_dtypes (and PyTorch)
do, specials included, on every backend present; GGUF BF16 tensors load bit for bit. The ops' BF16 cases run in
test_backend_ops on every backend."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ggpy
from ggpy.model_file import load_gguf


def _values() -> np.ndarray:
    rng = np.random.default_rng(3)
    ties = (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32)      # exactly half-way
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40, -1e-45, 65504.0], np.float32)
    return np.concatenate([rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 5000),
                           ties, -ties, special]).astype(np.float32)


@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
def test_float32_to_bf16_rounds_as_ml_dtypes(backend_name, request):
    backend = ggpy.CPUBackend(n_threads=2) if backend_name == "cpu" else request.getfixturevalue("cuda_backend")
    x = _values()
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (x.size,))
    y = ggpy.cpy(a, ctx.new_tensor(ggpy.BF16, (x.size,)))
    back = ggpy.cpy(y, ctx.new_tensor(ggpy.F32, (x.size,)))
    graph = ggpy.Graph().build_forward_expand(y).build_forward_expand(back)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(x)
    backend.compute(graph)
    want = x.astype(ml_dtypes.bfloat16)
    got = y.numpy()
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    np.testing.assert_array_equal(back.numpy()[~nan], want.astype(np.float32)[~nan])       # bf16 -> f32 is exact


def test_gguf_bf16_tensor_loads_bit_for_bit(tmp_path):
    gguf = pytest.importorskip("gguf")
    values = np.random.default_rng(4).standard_normal((3, 5, 7)).astype(ml_dtypes.bfloat16)
    path = tmp_path / "bf16.gguf"
    w = gguf.GGUFWriter(str(path), "test")
    w.add_tensor("w", values.view(np.uint16), raw_shape=values.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("f", values.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = load_gguf(path, ggpy.CPUBackend())
    t = model.get("w")
    assert t.type == ggpy.BF16 and t.ne == (7, 5, 3, 1)
    assert np.array_equal(t.numpy().view(np.uint16), values.view(np.uint16))
    assert np.array_equal(model.get("f").numpy(), values.astype(np.float32))


def test_load_gguf_converts_on_request(tmp_path):
    """load_gguf(convert=): the named tensors kept in another float type (rounded to nearest even), the others as
    the file stores them."""
    gguf = pytest.importorskip("gguf")
    values = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
    path = tmp_path / "f32.gguf"
    w = gguf.GGUFWriter(str(path), "test")
    w.add_tensor("a", values)
    w.add_tensor("b", values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = load_gguf(path, ggpy.CPUBackend(), convert=lambda name, t: ggpy.BF16 if name == "a" else None)
    assert model.get("a").type == ggpy.BF16 and model.get("b").type == ggpy.F32
    assert np.array_equal(model.get("a").numpy().view(np.uint16), values.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.array_equal(model.get("b").numpy(), values)
