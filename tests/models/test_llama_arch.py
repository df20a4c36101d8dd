"""Every architecture of ggpy/models/llama/arch.py against transformers: a tiny random Hugging Face model of it
(hf_convert.save_tiny: every weight random, norms too), converted by llama.cpp's own convert_hf_to_gguf.py, read
by ggpy on the CPU; its logits against transformers' float32 forward on the same tokens (F32 file: relative error
<= 1e-3 per row and the same top-1; F16 file: within F16's rounding). The tokens run at once, and as a prompt
then one token at a time (the KV cache, the token lane and, past the sliding window, its mask), by mul_mat +
soft_max and by flash_attn_ext."""
import importlib.util

import numpy as np
import pytest

if not (importlib.util.find_spec("transformers") and importlib.util.find_spec("tokenizers")):
    pytest.skip("transformers and tokenizers are needed", allow_module_level=True)
from hf_convert import convert, hf_logits, save_tiny, with_metadata

from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import GraphModel

SEED = int(np.random.SeedSequence().entropy % 2**32)
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 256}
# name -> (GGUF architecture, config class, model class, config[, metadata the converter leaves out])
MODELS = {
    "mistral": ("llama", "MistralConfig", "MistralForCausalLM", {"num_hidden_layers": 2, "sliding_window": 6},
                {"llama.attention.sliding_window": 6}),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", {"num_hidden_layers": 2, "head_dim": 16}),
    "olmo2": ("olmo2", "Olmo2Config", "Olmo2ForCausalLM", {"num_hidden_layers": 2}),
    "granite": ("granite", "GraniteConfig", "GraniteForCausalLM",
                {"num_hidden_layers": 2, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                     "attention_multiplier": 0.2, "logits_scaling": 4.0}),
    "gemma2": ("gemma2", "Gemma2Config", "Gemma2ForCausalLM",
               {"num_hidden_layers": 4, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 6,
                    "tie_word_embeddings": True, "attn_logit_softcapping": 3.0, "final_logit_softcapping": 4.0}),
    "gemma3": ("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM",
               {"num_hidden_layers": 6, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 6}),
    "phi3": ("phi3", "Phi3Config", "Phi3ForCausalLM",
             {"num_hidden_layers": 2, "original_max_position_embeddings": 64,
                  "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                   "short_factor": [1.0 + 0.3 * i for i in range(8)],
                                   "long_factor": [2.0 + 0.5 * i for i in range(8)]}}),
}
N_CTX = 64


@pytest.fixture(scope="module", params=list(MODELS))
def tiny(request, tmp_path_factory):
    """(architecture, transformers model, {outtype: GGUF path})."""
    name = request.param
    arch, config_cls, model_cls, config, *extra = MODELS[name]
    d = tmp_path_factory.mktemp(name)
    model = save_tiny(d / "hf", config_cls, model_cls, SEED, **SHAPE, **config)
    paths = convert(d / "hf", d / name, ("f32", "f16"))
    if extra:
        paths = {t: with_metadata(p, p.with_suffix(".swa.gguf"), extra[0]) for t, p in paths.items()}
    return arch, model, paths


def check_rows(got, want, tol):
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    assert rel.max() <= tol, f"relative error per row {np.round(rel, 6)} (seed {SEED})"
    assert (got.argmax(1) == want.argmax(1)).all(), f"top-1 differs (seed {SEED})"


@pytest.mark.parametrize("outtype,tol", [("f32", 1e-3), ("f16", 2e-2)])
def test_logits_match_transformers(tiny, outtype, tol):
    arch, model, paths = tiny
    gguf = open_llama(paths[outtype])
    assert gguf.hparams.arch == arch
    ids = [int(i) for i in np.random.default_rng(SEED).integers(3, 320, 20)]
    want = hf_logits(model, ids)
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="off")
    check_rows(g.eval(ids), want, tol)      # 16 + 4: two chunks
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="on")
    steps = [g.eval(ids[:9])] + [g.eval([t]) for t in ids[9:]]
    check_rows(np.concatenate(steps), want, tol)
