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
TYPES = ("f32", "f16", "q8_0")
F32_CACHE = {"cache_type_k": "f32", "cache_type_v": "f32"}     # the architecture's error, not the cache's rounding


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """{name: (transformers model, {outtype: GGUF path})} of every model of MODELS (one converter process)."""
    d = tmp_path_factory.mktemp("arch")
    models = {name: save_tiny(d / name, cfg[1], cfg[2], SEED, **SHAPE, **cfg[3]) for name, cfg in MODELS.items()}
    jobs = convert({(d / name, t): d / f"{name}-{t}.gguf" for name in MODELS for t in TYPES})
    out = {}
    for name, model in models.items():
        paths = {t: jobs[d / name, t] for t in TYPES}
        if len(MODELS[name]) > 4:       # metadata the converter leaves out
            paths = {t: with_metadata(p, p.with_suffix(".swa.gguf"), MODELS[name][4]) for t, p in paths.items()}
        out[name] = model, paths
    return out


def check_rows(got, want, tol):
    rel = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    assert rel.max() <= tol, f"relative error per row {np.round(rel, 6)} (seed {SEED})"
    # same top-1 wherever the reference's best two logits are further apart than twice the row's largest error (a
    # nearer tie may turn either way at F16's precision); most rows are decided so
    top2 = np.sort(want, axis=1)[:, -2:]
    decided = top2[:, 1] - top2[:, 0] > 2 * np.abs(got - want).max(axis=1)
    assert decided.mean() >= 0.5, f"only {decided.sum()} of {len(decided)} rows decided (seed {SEED})"
    assert (got.argmax(1) == want.argmax(1))[decided].all(), f"top-1 differs (seed {SEED})"


@pytest.mark.parametrize("outtype,tol", [("f32", 1e-3), ("f16", 5e-3)])    # F16: up to 1.6e-3 seen
@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_transformers(converted, name, outtype, tol):
    model, paths = converted[name]
    gguf = open_llama(paths[outtype])
    assert gguf.hparams.arch == MODELS[name][0]
    ids = [int(i) for i in np.random.default_rng(SEED).integers(3, 320, 20)]
    want = hf_logits(model, ids)
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="off", **F32_CACHE)
    check_rows(g.eval(ids), want, tol)      # 16 + 4: two chunks
    g = GraphModel(gguf, "cpu", n_threads=1, n_ctx=N_CTX, n_batch=16, flash_attn="on", **F32_CACHE)
    steps = [g.eval(ids[:9])] + [g.eval([t]) for t in ids[9:]]
    check_rows(np.concatenate(steps), want, tol)


@pytest.mark.parametrize("name", list(MODELS))
def test_cuda_logits_match_transformers(cuda_backend, converted, name):
    """The F32 files on the CUDA backend (flash attention where it runs it; a prompt, then one token at a time):
    within 1e-2 per row of transformers' float32 logits (its products may round through F16/TF32), the same top-1."""
    model, paths = converted[name]
    ids = [int(i) for i in np.random.default_rng(SEED).integers(3, 320, 20)]
    g = GraphModel(open_llama(paths["f32"]), cuda_backend, n_ctx=N_CTX, n_batch=16, flash_attn="auto", **F32_CACHE)
    got = np.concatenate([g.eval(ids[:9])] + [g.eval([t]) for t in ids[9:]])
    check_rows(got, hf_logits(model, ids), 1e-2)


# llama.cpp leaves out: its llama reads no sliding window; its vocabulary loader wants Phi-3's own special tokens
# (unordered_map::at on the tiny BPE)
NOT_IN_LLAMA_CPP = ("mistral", "phi3")


@pytest.mark.parametrize("name", [n for n in MODELS if n not in NOT_IN_LLAMA_CPP])
def test_q8_0_no_worse_than_llama_cpp(converted, name):
    """The converter's Q8_0 file: ggpy's distance from transformers' float32 logits within llama.cpp's own on the same
    file (both with F16 KV caches), and the same top-1 as llama.cpp."""
    from llama_cpp_ref import llama_cpp
    model, paths = converted[name]
    ids = [int(i) for i in np.random.default_rng(SEED + 1).integers(3, 320, 20)]
    want = hf_logits(model, ids)
    ref = llama_cpp(paths["q8_0"], n_ctx=N_CTX, n_threads=1, logits_all=True)
    ref.eval(ids)
    theirs = np.array(ref.scores[:len(ids)], dtype=np.float64)
    ours = GraphModel(open_llama(paths["q8_0"]), "cpu", n_threads=1, n_ctx=N_CTX, flash_attn="off").eval(ids)
    err_ours, err_theirs = (np.linalg.norm(x - want, axis=1) / np.linalg.norm(want, axis=1) for x in (ours, theirs))
    assert err_ours.max() <= 1.25 * err_theirs.max() + 1e-3, f"{err_ours.max():.2e} vs llama.cpp {err_theirs.max():.2e}"
    assert (ours.argmax(1) == theirs.argmax(1)).mean() >= 0.9, f"top-1 (seed {SEED})"


def test_hparams_as_llama_cpp_reads_them(converted):
    """The architectures' own metadata, as llama.cpp's loaders read it from the converter's files."""
    hp = {name: open_llama(paths["f32"]).hparams for name, (_, paths) in converted.items()}
    assert hp["gemma2"].swa_layers == (True, False, True, False) and hp["gemma2"].n_swa == 6
    assert (hp["gemma2"].attn_softcap, hp["gemma2"].final_softcap, hp["gemma2"].embd_scale) == (3.0, 4.0, 8.0)
    assert hp["gemma3"].swa_layers == (True,) * 5 + (False,) and hp["gemma3"].rope_base_swa == 10000.0
    assert hp["gemma3"].rope_base != hp["gemma3"].rope_base_swa
    g = hp["granite"]
    assert (g.embd_scale, g.residual_scale, g.kq_scale, g.logit_scale) == pytest.approx((3.0, 0.5, 0.2, 4.0))
    assert hp["mistral"].arch == "llama" and hp["mistral"].swa_layers == (True, True)
    assert hp["phi3"].rope_attn_factor == pytest.approx(np.sqrt(1 + np.log(256 / 64) / np.log(64)))
    assert not any(h.n_swa for name, h in hp.items() if name not in ("gemma2", "gemma3", "mistral"))
