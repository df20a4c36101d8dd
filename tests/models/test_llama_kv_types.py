"""The KV cache types (f32, f16, q8_0 keys and values, llama.cpp's -ctk / -ctv) with and without flash attention:
ggpy's logits against the float64 reference forward whose cache rounds its keys and values as the cache type does
(F16; Q8_0 by gguf's quantize + dequantize), and within that rounding of the plain float64 forward; the choice of
flash attention ("auto": where the backend runs flash_attn_ext) and the refusals (a quantized V without flash
attention, heads that do not fill Q8_0 blocks)."""
import gguf
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_tiny import write_tiny_llama

import ggpy
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.reference import ReferenceModel
from ggpy.models.llama.runner import GraphModel

SEED = int(np.random.SeedSequence().entropy % 2**32)


def rounded(type_name):
    """The cache type's rounding of keys or values (n, heads, head_dim) in float64 (None: f32, nothing to round;
    values pass through float32 first, as the graph's are)."""
    if type_name == "f16":
        return lambda x: x.astype(np.float32).astype(np.float16).astype(np.float64)
    if type_name == "q8_0":
        q8 = gguf.GGMLQuantizationType.Q8_0
        return lambda x: gguf.quants.dequantize(gguf.quants.quantize(x.astype(np.float32), q8), q8).astype(np.float64)
    return None


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def greedy_logits(model, prompt, n):
    """Logits of `prompt` (read in the model's chunks) and of n greedy tokens fed back one at a time."""
    logits = [model.eval(prompt)]
    for _ in range(n):
        logits.append(model.eval([int(logits[-1][-1].argmax())]))
    return np.concatenate(logits)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Heads of 32 values (Q8_0 blocks), grouped-query (4 query heads, 2 KV heads), 2 blocks; F32 weights (the
    products exact within float32 rounding, whatever mul_mat the CPU picks: the cache's rounding is what shows)."""
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "kv.gguf", seed=SEED, n_embd=128, n_head=4,
                            n_head_kv=2, types=dict.fromkeys(F32_WEIGHTS, gguf.GGMLQuantizationType.F32))


F32_WEIGHTS = ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


# (K type, V type, flash attention, max relative error against the rounding reference, against the plain one).
# Measured: f16 5e-7 / 6e-6 (off / on) and 1.7e-4; Q8_0 under flash attention mostly 3e-7 / 7e-6, up to 1.2e-4 where a
# value computed in float32 lands on the other side of a Q8_0 step than the reference's (one step is 1/127 of its
# block's largest value), and 4e-3 from the plain forward; a Q8_0 K without flash attention 2.9e-3 and 3.6e-3:
# mul_mat's q8 kernel rounds q to 8 bits too (as llama.cpp).
CASES = [
    ("f16", "f16", "off", 1e-4, 2e-3),
    ("f16", "f16", "on", 1e-4, 2e-3),
    ("q8_0", "f16", "off", 1e-2, 2e-2),
    ("q8_0", "q8_0", "on", 1e-3, 2e-2),
    ("f16", "q8_0", "on", 1e-3, 2e-2),
    ("f32", "q8_0", "on", 1e-3, 2e-2),
]


@pytest.mark.parametrize("type_k,type_v,flash,tight,loose", CASES,
                         ids=[f"{k}-{v}-fa_{f}" for k, v, f, _, _ in CASES])
def test_logits_per_cache_type(tiny, type_k, type_v, flash, tight, loose):
    """A 21-token prompt in chunks of 8, then 5 generated tokens (their greedy choice fed back)."""
    m = open_llama(tiny)
    model = GraphModel(m, "cpu", n_threads=2, n_batch=8, flash_attn=flash, cache_type_k=type_k, cache_type_v=type_v)
    assert model.flash_attn == (flash == "on") and model.cache.k[0].type.name == type_k
    prompt = [int(i) for i in np.random.default_rng(SEED).integers(0, m.hparams.n_vocab, 21)]
    ours = greedy_logits(model, prompt, 5)
    ref = ReferenceModel(m, rounded(type_k), rounded(type_v))
    # the reference reads the same tokens: ggpy's greedy choices, which follow from its logits
    tokens = prompt + [int(t) for t in ours[len(prompt) - 1:-1].argmax(1)]
    with_rounding = np.concatenate([ref.eval(tokens[:21])] + [ref.eval([t]) for t in tokens[21:]])
    plain = ReferenceModel(m).eval(tokens)
    err, err_plain = rel(ours, with_rounding), rel(ours, plain)
    assert err < tight, f"relative error {err:.2e} against the rounding reference (seed {SEED})"
    assert err_plain < loose, f"relative error {err_plain:.2e} against the float64 forward (seed {SEED})"


def test_auto_takes_flash_attention_where_the_backend_runs_it(tiny):
    m = open_llama(tiny)
    assert GraphModel(m, "cpu", n_threads=1).flash_attn          # the CPU runs flash_attn_ext: auto is on
    refusing = ggpy.CPUBackend(n_threads=1)
    refusing.supports_op = lambda node: node.op != "flash_attn_ext"    # a backend without flash attention
    model = GraphModel(m, refusing, flash_attn="auto")
    assert not model.flash_attn and model.cache.v[0].type == ggpy.F16
    with pytest.raises(ValueError, match="flash attention is on but"):
        GraphModel(m, refusing, flash_attn="on")
    with pytest.raises(ValueError, match="q8_0 V cache needs flash attention"):
        GraphModel(m, refusing, cache_type_v="q8_0")


def test_refusals(tiny, tmp_path):
    m = open_llama(tiny)
    with pytest.raises(ValueError, match="q8_0 V cache needs flash attention"):
        GraphModel(m, "cpu", flash_attn="off", cache_type_v="q8_0")
    with pytest.raises(ValueError, match="KV cache types must be one of f32, f16, q8_0"):
        GraphModel(m, "cpu", cache_type_k="q4_0")
    with pytest.raises(ValueError, match="'on', 'off' or 'auto'"):
        GraphModel(m, "cpu", flash_attn="yes")
    small = open_llama(write_tiny_llama(tmp_path / "m.gguf", seed=SEED, n_layer=1))     # heads of 16 values
    with pytest.raises(ValueError, match="q8_0 K cache needs heads of a multiple of 32 values, not 16"):
        GraphModel(small, "cpu", cache_type_k="q8_0")
