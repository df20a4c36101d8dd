"""llama's graph runs each residual add and the RMSNorm after it as one fused kernel (the add_rms_norm pattern):
graph.dump(backend) shows the groups, and a model evaluated with the fusion gives the logits of one without."""
import re

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import write_tiny_llama

import ggpy
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.model import forward, new_inputs
from ggpy.models.llama.runner import KV_PAD, GraphModel


@pytest.mark.parametrize("all_logits", [True, False])
def test_residual_adds_fuse_with_the_next_rms_norm(tmp_path, all_logits):
    """Both residual adds of each block feed an RMSNorm (the next sublayer's, the output norm's last); with only the
    last token's logits the output norm reads a view of the last add, which stays unfused."""
    n_layer = 2
    model = GraphModel(open_llama(write_tiny_llama(tmp_path / "m.gguf", seed=3, n_layer=n_layer)), "cpu", n_threads=2)
    logits = forward(model.weights, model.hp, model.cache, new_inputs(ggpy.Context(), 5, KV_PAD), all_logits)
    graph = ggpy.Graph().build_forward_expand(logits)
    runs = model.backend.fused_runs(graph)
    pairs = [k for k, run in enumerate(runs) if [n.op for n in run] == ["add", "rms_norm"]]
    assert len(pairs) == 2 * n_layer - (not all_logits)
    dump = graph.dump(model.backend).splitlines()
    assert f"{len(runs)} fused groups" in dump[0]
    for k in pairs:
        lines = [line for line in dump if f" g{k} " in line]
        assert [re.match(r"n\s*\d+ (\S+)", line).group(1) for line in lines] == ["add", "rms_norm"], lines


def test_fused_logits_equal_unfused(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", seed=4, n_layer=2)
    ids = [int(i) for i in np.random.default_rng(4).integers(0, 100, 6)]
    fused = GraphModel(open_llama(path), ggpy.CPUBackend(n_threads=2)).eval(ids)
    plain = GraphModel(open_llama(path), ggpy.CPUBackend(n_threads=2, fuse=False)).eval(ids)
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)
