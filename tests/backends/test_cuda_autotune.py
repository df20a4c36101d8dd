"""CUDABackend(autotune=True): cuBLASLt algorithms and conv_2d implementations measured once per shape on scratch
memory; results match float64 references as the untuned backend's do, a second process reads the disk cache and
measures nothing, forget() measures again, a corrupted cache file is ignored. The cache tests need cuda-python but
no GPU; the others skip without one (or without nvmath-python)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import gguf
import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.cases import conv, matmul
from ggpy.test_backend_ops.cases.util import layout
from ggpy.test_backend_ops.harness import run_case

pytest.importorskip("cuda.bindings.driver")

from ggpy.backends.cuda import autotune, cublas, cudnn_conv, kernels  # noqa: F401 - kernels registers the CUDA entries
from ggpy.backends.cuda.registry import KERNELS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty autotune cache of the test's own (disk and process)."""
    monkeypatch.setenv("GGPY_AUTOTUNE_CACHE", str(tmp_path))
    monkeypatch.setattr(autotune.WINNERS, "memory", {})
    return tmp_path


@pytest.fixture(scope="module")
def tuned(cuda_backend):
    if cublas.MISSING:
        pytest.skip(cublas.MISSING)
    return ggpy.backends.cuda.CUDABackend("cuda", autotune=True)


def _conv_node(how="cont"):
    ctx = ggpy.Context()
    return ggpy.conv_2d(layout(ctx, ggpy.F32, (3, 3, 16, 24)), layout(ctx, ggpy.F32, (20, 18, 16, 1), how),
                        1, 1, 1, 1, 1, 1)


STAND_IN = SimpleNamespace(device=SimpleNamespace(name="GPU", cc=(9, 0)), allow_tf32=False)


# -- the cache (no GPU) -------------------------------------------------------------------------------------------
def test_cache_round_trip_and_forget(cache):
    key = autotune.shape_key(_conv_node(), STAND_IN)
    calls = []

    def measure():
        calls.append(1)
        return ["im2col", {"implicit": 2e-5, "im2col": 1e-5}]
    before = dict(autotune.WINNERS.stats)
    assert autotune.WINNERS.lookup(key, measure)[0] == "im2col" and len(calls) == 1
    assert autotune.WINNERS.path() == cache / "cuda.json"
    assert json.loads(autotune.WINNERS.path().read_text()) == {repr(key): ["im2col", {"implicit": 2e-5, "im2col": 1e-5}]}
    autotune.WINNERS.lookup(key, measure)
    autotune.WINNERS.memory.clear()                        # a second process: the disk answers
    assert autotune.WINNERS.lookup(key, measure)[0] == "im2col" and len(calls) == 1
    assert [autotune.WINNERS.stats[k] - before[k] for k in ("measured", "hits", "disk_hits")] == [1, 1, 1]
    autotune.WINNERS.forget(key)
    assert key not in autotune.WINNERS.memory and json.loads(autotune.WINNERS.path().read_text()) == {}
    autotune.WINNERS.lookup(key, measure)
    assert len(calls) == 2


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"KEY": 42}', '{"KEY": [1, 2, 3]}'])
def test_corrupted_cache_is_ignored(cache, text):
    key = autotune.shape_key(_conv_node(), STAND_IN)
    autotune.WINNERS.path().write_text(text.replace('"KEY"', json.dumps(repr(key))))
    assert autotune.WINNERS.lookup(key, lambda: ["implicit", {"implicit": 1.0}])[0] == "implicit"
    assert json.loads(autotune.WINNERS.path().read_text())[repr(key)] == ["implicit", {"implicit": 1.0}]


def test_shape_key():
    """Nodes of equal types, shapes and strides share a key; strides, TF32 and the device tell keys apart."""
    key = autotune.shape_key(_conv_node(), STAND_IN)
    assert key == autotune.shape_key(_conv_node(), STAND_IN) and eval(repr(key)) == key
    assert key != autotune.shape_key(_conv_node("permuted"), STAND_IN)
    assert key != autotune.shape_key(_conv_node(), SimpleNamespace(device=STAND_IN.device, allow_tf32=True))
    assert key != autotune.shape_key(_conv_node(), SimpleNamespace(device=SimpleNamespace(name="GPU", cc=(8, 0)),
                                                                   allow_tf32=False))
    expected = (["implicit"] + (["im2col"] if cublas.MISSING is None else [])
                + (["cudnn"] if cudnn_conv.accepts(_conv_node()) else []))
    assert KERNELS["conv_2d"].candidates(_conv_node(), STAND_IN) == expected


def _mul_mat(a_type, n, k=64, m=40, a_batch=1, b_batch=1):
    ctx = ggpy.Context()
    return ggpy.mul_mat(ctx.new_tensor(a_type, (k, m, a_batch)), ctx.new_tensor(ggpy.F32, (k, n, b_batch)))


def test_mul_mat_impls_in_one_place():
    """mul_mat's dot-product kernels (mmv, mmvq) and cuBLASLt GEMMs (cublaslt) are implementations of one entry:
    choose takes mmvq for few columns of a quantized a, mmv for a grouped or differently typed a, accepts says which
    can run a node (the candidates autotune times), and the kernel name follows the implementation."""
    entry = KERNELS["mul_mat"]
    gemm = ["cublaslt"] if cublas.MISSING is None else []
    cases = [(_mul_mat(ggpy.Q8_0, 3), "mmvq", gemm + ["mmv", "mmvq"]), (_mul_mat(ggpy.F16, 8), "mmv", gemm + ["mmv"]),
             (_mul_mat(ggpy.F32, 4, a_batch=2, b_batch=4), "mmv", gemm + ["mmv"]),
             (_mul_mat(ggpy.F32, 4), "cublaslt", gemm + ["mmv"]), (_mul_mat(ggpy.F32, 9), "cublaslt", gemm),
             (_mul_mat(ggpy.F32, 4, k=60), "cublaslt", gemm)]
    for node, chosen, candidates in cases:
        assert entry.choose(node, STAND_IN) == chosen and entry.candidates(node, STAND_IN) == candidates, node.ne
        assert entry.kernel_name(node, "mmv").startswith("mmv_") and entry.kernel_name(node, "cublaslt").startswith("cublaslt_")
    with pytest.raises(ggpy.UnsupportedOpError, match="cannot run as mmv"):
        entry.temp_size(_mul_mat(ggpy.F32, 9), "mmv", STAND_IN)


# -- on the GPU ---------------------------------------------------------------------------------------------------
MUL_MAT = [c for c in matmul.cases() if "perf" not in c.tags                # quantized a: test_backend_ops.py
           and not c.build(ggpy.Context()).src[0].type.quantized][::2]
CONV_2D = [c for c in conv.cases() if c.op == "conv_2d"][::3]


@pytest.mark.parametrize("case", MUL_MAT + CONV_2D, ids=lambda c: c.id)
def test_results_stay_correct(tuned, cache, case):
    measured = autotune.WINNERS.stats["measured"]
    result = run_case(case, tuned)
    assert result.ok, f"{case.id}: {result.message}"
    assert autotune.WINNERS.stats["measured"] > measured or case.op != "mul_mat"     # mmv vs cublaslt, or the GEMM


def _bias_residual_graph(backend, wtype, rng):
    """mul_mat -> add(bias) -> add(residual): one GEMM with the BIAS epilogue and C = the residual."""
    ctx = ggpy.Context()
    w = ctx.new_tensor(wtype, (48, 40)).set_input()
    x = ctx.new_tensor(ggpy.F32, (48, 90)).set_input()
    bias = ctx.new_tensor(ggpy.F32, (40,)).set_input()
    r_in = ctx.new_tensor(ggpy.F32, (40, 90)).set_input()
    r = ggpy.scale(r_in, 1.0)
    y = ggpy.add(r, ggpy.add(ggpy.mul_mat(w, x), bias))
    graph = ggpy.Graph()
    graph.build_forward_expand(y)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    vals = {t: rng.standard_normal(t.shape).astype(np.float32) for t in (w, x, bias, r_in)}
    for t, v in vals.items():
        t.set(v)
    backend.compute(graph)
    wv = (vals[w].astype(np.float16) if wtype == ggpy.F16 else vals[w]).astype(np.float64)
    ref = vals[x].astype(np.float64) @ wv.T + vals[bias] + vals[r_in]
    return graph, y, ref


@pytest.mark.parametrize("wtype", [ggpy.F32, ggpy.F16], ids=lambda t: t.name)
def test_epilogue_results_match(tuned, cache, wtype):
    """The winner (measured without the epilogue) runs with BIAS and C, as the untuned backend's algorithm does."""
    rng = np.random.default_rng(3)
    graph, y, ref = _bias_residual_graph(tuned, wtype, rng)
    gemms = [st.name for st in tuned.program(graph) if st.name.startswith("cublaslt")]
    assert gemms == [f"cublaslt_{wtype.name.lower()}_f32+bias+residual+tuned"]
    assert np.allclose(y.numpy(), ref, atol=1e-4)
    _, y0, ref0 = _bias_residual_graph(ggpy.backends.cuda.CUDABackend("cuda"), wtype, rng)
    assert np.allclose(y0.numpy(), ref0, atol=1e-4)
    (key, (winner, times)), = [(k, v) for k, v in autotune.WINNERS.memory.items() if k[0] == "gemm"]
    assert winner is not None and times and min(t for t in times.values() if t is not None) > 0


def test_conv_measured_once_forced_not_at_all(tuned, cache):
    node = _conv_node()
    graph = ggpy.Graph()
    graph.build_forward_expand(node)
    measured = autotune.WINNERS.stats["measured"]
    report = ggpy.GraphAllocator(tuned).alloc_graph(graph).report()
    winner, times = autotune.WINNERS.memory[autotune.shape_key(node, tuned)]
    assert set(times) == set(KERNELS["conv_2d"].candidates(node, tuned)) >= {"implicit", "im2col"}
    assert winner == min((c for c, t in times.items() if t is not None), key=times.get), times
    assert tuned.impl_for(node) == winner and "conv_2d_f32_f32+tuned" in report
    assert autotune.WINNERS.stats["measured"] >= measured + 1
    hits = autotune.WINNERS.stats["hits"]
    assert tuned.impl_for(_conv_node()) == winner and autotune.WINNERS.stats["hits"] == hits + 1
    forced = ggpy.backends.cuda.CUDABackend("cuda", autotune=True, force={"conv_2d": "implicit"})
    autotune.WINNERS.memory.clear()
    assert forced.impl_for(node) == "implicit" and forced.kernel_name(node) == "conv_2d_f32_f32"
    assert autotune.WINNERS.memory == {}
    autotune.WINNERS.forget(autotune.shape_key(node, tuned))
    assert repr(autotune.shape_key(node, tuned)) not in json.loads(autotune.WINNERS.path().read_text())
    measured = autotune.WINNERS.stats["measured"]
    tuned.impl_for(node)
    assert autotune.WINNERS.stats["measured"] == measured + 1


@pytest.mark.parametrize("a_type", [ggpy.F32, ggpy.F16, ggpy.Q4_0], ids=lambda t: t.name)
def test_mul_mat_forced_and_tuned_either_way(tuned, cache, a_type):
    """force={"mul_mat": "mmv" | "cublaslt" (| "mmvq")} runs a few-column product each way, all equal to float64;
    autotune times the candidates and runs the fastest."""
    rng = np.random.default_rng(7)
    a_vals, b_vals = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((3, 64)).astype(np.float32)
    if a_type.quantized:
        qt = gguf.GGMLQuantizationType(a_type.ggml_id)
        a_vals = gguf.quants.quantize(a_vals, qt)
        a_ref = gguf.quants.dequantize(a_vals, qt)
    else:
        a_ref = a_vals.astype(np.float16) if a_type == ggpy.F16 else a_vals
    results = {}
    for impl in ("mmv", "cublaslt") + (("mmvq",) if a_type.quantized else ()) + (None,):
        backend = tuned if impl is None else ggpy.backends.cuda.CUDABackend("cuda", force={"mul_mat": impl})
        ctx = ggpy.Context()
        a, b = ctx.new_tensor(a_type, (64, 40)).set_input(), ctx.new_tensor(ggpy.F32, (64, 3)).set_input()
        y = ggpy.mul_mat(a, b)
        graph = ggpy.Graph().build_forward_expand(y)
        ggpy.GraphAllocator(backend).alloc_graph(graph)
        a.set(a_vals)
        b.set(b_vals)
        backend.compute(graph)
        results[impl] = (y.numpy(), [st.name for st in backend.program(graph)])
        if impl is not None:
            assert results[impl][1][-1].startswith(impl), results[impl][1]
    ref = b_vals.astype(np.float64) @ a_ref.astype(np.float64).T
    for impl, (out, names) in results.items():      # mmvq rounds b to 8 bits: |error| up to ~0.13 here
        atol = 0.3 if a_type.quantized and impl in ("mmvq", None) else 2e-2
        np.testing.assert_allclose(out.reshape(ref.shape), ref, rtol=2e-2, atol=atol, err_msg=f"{impl}: {names}")
    winner, times = next(v for k, v in autotune.WINNERS.memory.items() if k[0] == "impl" and k[3] == "mul_mat")
    assert set(times) == {"mmv", "cublaslt"} | ({"mmvq"} if a_type.quantized else set()) and winner in times


SCRIPT = """
import json, numpy as np, ggpy
from ggpy.backends.cuda import CUDABackend, autotune
b = CUDABackend("cuda", autotune=True)
ctx = ggpy.Context()
w, x, bias = (ctx.new_tensor(ggpy.F32, ne).set_input() for ne in ((64, 96), (64, 200), (96,)))
k, img = (ctx.new_tensor(ggpy.F32, ne).set_input() for ne in ((3, 3, 16, 24), (20, 18, 16, 1)))
y, c = ggpy.add(ggpy.mul_mat(w, x), bias), ggpy.conv_2d(k, img, 1, 1, 1, 1, 1, 1)
g = ggpy.Graph()
g.build_forward_expand(y)
g.build_forward_expand(c)
ggpy.GraphAllocator(b).alloc_graph(g)
rng = np.random.default_rng(0)
for t in (w, x, bias, k, img):
    t.set(rng.standard_normal(t.shape).astype(np.float32))
b.compute(g)
print(json.dumps([autotune.WINNERS.stats, [st.name for st in b.program(g)], y.numpy().tolist(), c.numpy().tolist()]))
"""


def test_second_process_measures_nothing(tuned, cache):
    env = dict(os.environ, GGPY_AUTOTUNE_CACHE=str(cache))
    runs = [json.loads(subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                                      check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__)))).stdout)
            for _ in range(2)]
    (first, names, y1, c1), (second, names2, y2, c2) = runs
    assert first["measured"] >= 2 and first["disk_hits"] == 0
    assert second["measured"] == 0 and second["disk_hits"] >= 2
    assert names == names2 and "cublaslt_f32_f32+bias+tuned" in names
    assert np.allclose(y1, y2, rtol=1e-6, atol=1e-6) and np.allclose(c1, c2, rtol=1e-6, atol=1e-6)
