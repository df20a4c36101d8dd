"""argmax and top_k as a sampling head: logits computed by the graph, the token ids (argmax, the top k) and the top
k's logits (get_rows on a reshaped view) read back, checked with numpy on the logits the graph computed; and the
constructors' checks."""
from __future__ import annotations

import numpy as np
import pytest

import ggpy
from ggpy.types import F32, I32

D = 64


def sampling_head(n_vocab: int, rows: int, k: int) -> ggpy.Graph:
    """logits = w h (ne = (n_vocab, rows)) and the tensors a sampler reads: best (argmax), ids (top k), values."""
    ctx = ggpy.Context()
    h = ctx.new_tensor_2d(F32, D, rows).set_name("h").set_input()
    w = ctx.new_tensor_2d(F32, D, n_vocab).set_name("w").set_input()
    logits = ggpy.mul_mat(w, h).set_name("logits").set_output()
    ids = ggpy.top_k(logits, k).set_name("ids").set_output()
    values = ggpy.get_rows(ggpy.reshape_3d(logits, 1, n_vocab, rows), ids).set_name("values").set_output()
    best = ggpy.argmax(logits).set_name("best").set_output()
    graph = ggpy.Graph()
    for t in (logits, ids, values, best):
        graph.build_forward_expand(t)
    return graph


@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
@pytest.mark.parametrize("n_vocab,rows,k", [(49152, 1, 40), (128256, 3, 100), (151936, 2, 256), (300, 4, 1)])
def test_sampling_head(backend_name, n_vocab, rows, k, request):
    backend = ggpy.CPUBackend(n_threads=2) if backend_name == "cpu" else request.getfixturevalue("cuda_backend")
    runner = ggpy.GraphRunner(sampling_head(n_vocab, rows, k), backend)
    rng = np.random.default_rng(n_vocab + rows + k)
    w = rng.standard_normal((n_vocab, D)).astype(np.float32)
    for _ in range(2):
        h = rng.standard_normal((rows, D)).astype(np.float32)
        w[[3, 7, n_vocab - 1]] = h[0]         # row 0's largest logits, equal: the lower index first
        runner.set(h=h.squeeze(0) if rows == 1 else h, w=w).compute()
        logits = runner.get("logits").reshape(rows, n_vocab)
        ids = runner.get("ids").reshape(rows, k)
        expected = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
        np.testing.assert_array_equal(ids, expected)
        np.testing.assert_array_equal(runner.get("values").reshape(rows, k), np.take_along_axis(logits, ids, -1))
        np.testing.assert_array_equal(runner.get("best").reshape(rows), np.argmax(logits, axis=-1))


def test_constructor_checks():
    ctx = ggpy.Context()
    a = ctx.new_tensor_2d(F32, 10, 3)
    assert ggpy.top_k(a, 10).ne == (10, 3, 1, 1) and ggpy.top_k(a, 1).type == I32
    assert ggpy.argmax(a).ne == (3, 1, 1, 1)
    with pytest.raises(ggpy.ShapeError, match="top_k: k = 11 is larger"):
        ggpy.top_k(a, 11)
    with pytest.raises(ggpy.ShapeError, match="top_k: k must be an int >= 1"):
        ggpy.top_k(a, 0)
    with pytest.raises(ggpy.TypeMismatchError, match="top_k"):
        ggpy.top_k(ctx.new_tensor_2d(I32, 10, 3), 2)
    with pytest.raises(ggpy.ShapeError, match="argmax: 'a' must be a matrix"):
        ggpy.argmax(ctx.new_tensor_3d(F32, 10, 3, 2))
