"""The mixture-of-experts architectures against transformers: tiny random Qwen3-MoE and Mixtral models (hf_convert:
every weight random, norms too) converted by llama.cpp's convert_hf_to_gguf.py, read by ggpy (qwen3moe; llama with
llama.expert_count); logits against transformers' float32 forward on the same tokens (F32 file: relative error <=
1e-3 per row, the same top-1), at once and as a prompt then one token at a time."""
import importlib.util

import numpy as np
import pytest

if not (importlib.util.find_spec("transformers") and importlib.util.find_spec("tokenizers")):
    pytest.skip("transformers and tokenizers are needed", allow_module_level=True)
from hf_convert import convert, hf_logits, save_tiny

from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import GraphModel

SEED = int(np.random.SeedSequence().entropy % 2**32)
SHAPE = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
         "num_hidden_layers": 2}
MODELS = {  # name -> (GGUF architecture, config class, model class, config)
    "qwen3moe": ("qwen3moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 {"head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 8,
                  "num_experts_per_tok": 3, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}),
    "mixtral": ("llama", "MixtralConfig", "MixtralForCausalLM",
                {"intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2}),
}
N_CTX = 64


@pytest.fixture(scope="module", params=list(MODELS))
def tiny(request, tmp_path_factory):
    name = request.param
    arch, config_cls, model_cls, config = MODELS[name]
    d = tmp_path_factory.mktemp(name)
    model = save_tiny(d / "hf", config_cls, model_cls, SEED, **SHAPE, **config)
    return arch, model, convert(d / "hf", d / name, ("f32",))


def check_rows(got, want, tol):
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    assert rel.max() <= tol, f"relative error per row {np.round(rel, 6)} (seed {SEED})"
    assert (got.argmax(1) == want.argmax(1)).all(), f"top-1 differs (seed {SEED})"


def test_logits_match_transformers(tiny):
    arch, model, paths = tiny
    gguf = open_llama(paths["f32"])
    assert gguf.hparams.arch == arch and gguf.hparams.n_expert == model.config.to_dict().get(
        "num_experts", model.config.to_dict().get("num_local_experts"))
    ids = [int(i) for i in np.random.default_rng(SEED).integers(3, 320, 20)]
    want = hf_logits(model, ids)
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="off")
    check_rows(g.eval(ids), want, 1e-3)
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="on")
    steps = [g.eval(ids[:9])] + [g.eval([t]) for t in ids[9:]]
    check_rows(np.concatenate(steps), want, 1e-3)
