"""llama's graph runs its decode patterns fused (ggpy/graph/fusion.py): each RMSNorm with its weight (after the
residual add that feeds it, or alone), the k rope writing the KV cache (rope_set_rows), the residual adds in the norm
after them or in the product before them (mul_mat_add, where the backend runs it); graph.dump(backend) shows the
groups, and a model evaluated with the fusion gives the logits of one without."""
import re

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import write_tiny_llama

import ggpy
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.model import forward, new_inputs
from ggpy.models.llama.runner import KV_PAD, GraphModel


@pytest.mark.parametrize("n_tokens", [1, 5])
@pytest.mark.parametrize("all_logits", [True, False])
def test_decode_patterns_fuse(tmp_path, all_logits, n_tokens):
    n_layer = 2
    model = GraphModel(open_llama(write_tiny_llama(tmp_path / "m.gguf", seed=3, n_layer=n_layer)), "cpu", n_threads=2)
    logits = forward(model.weights, model.hp, model.cache, new_inputs(ggpy.Context(), n_tokens, KV_PAD), all_logits)
    graph = ggpy.Graph().build_forward_expand(logits)
    runs = model.backend.fused_runs(graph)
    ops = [[n.op for n in run] for run in runs]
    norms = [n for n in graph.nodes if n.op == "rms_norm"]
    assert len(norms) == 2 * n_layer + 1
    assert all(any(norm in run and run[-1].op == "mul" for run in runs) for norm in norms), ops
    assert ops.count(["rope", "set_rows"]) == n_layer, ops
    residual = [n for n in graph.nodes if n.op == "add" and any(s.op == "mul_mat" for s in n.src)]
    fused = [add for add in residual if any(add in run for run in runs)]
    with_product = ["mul_mat", "add"] in ops
    assert len(fused) == 2 * n_layer - (not all_logits and not with_product), ops
    dump = graph.dump(model.backend).splitlines()
    assert f"{len(runs)} fused groups" in dump[0]
    for k, run in enumerate(ops):
        lines = [line for line in dump if f" g{k} " in line]
        assert [re.match(r"n\s*\d+ (\S+)", line).group(1) for line in lines] == run, lines


@pytest.mark.parametrize("arch,cache", [("llama", "f16"), ("qwen2", "q8_0")])
def test_fused_logits_equal_unfused(tmp_path, arch, cache):
    """A prompt, then decode steps (the fused rope wrote the cache rows they read; into a Q8_0 K cache head by head):
    the logits of the fused graph are those of the unfused one (qwen2: q/k/v biases as mul_mat_add at one token)."""
    path = write_tiny_llama(tmp_path / "m.gguf", arch=arch, seed=4, n_layer=2, n_embd=128)
    ids = [int(i) for i in np.random.default_rng(4).integers(0, 100, 6)]
    fused, plain = (GraphModel(open_llama(path), ggpy.CPUBackend(n_threads=2, fuse=fuse), cache_type_k=cache)
                    for fuse in (True, False))
    np.testing.assert_allclose(fused.eval(ids), plain.eval(ids), rtol=1e-5, atol=1e-5)
    for token in (7, 3):
        np.testing.assert_allclose(fused.eval([token]), plain.eval([token]), rtol=1e-5, atol=1e-5)
