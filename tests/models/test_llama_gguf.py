"""ggpy.models.llama's model file checks: a good small llama/qwen2 GGUF opens with the hyper-parameters written; another
architecture, a missing key or tensor, a wrong shape, an unknown or unsupported tensor type, a cut-off file, and
random truncations and byte flips are all refused with ggpy.ModelFileError naming the problem."""
import os
import shutil

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from timeouts import deadline
from llama_tiny import Q, write_tiny_llama

from ggpy.models.llama.gguf_file import open_llama, read_gguf
from ggpy.models.llama.tokenizer import Tokenizer
from ggpy import ModelFileError

SEED = int(np.random.SeedSequence().entropy % 2**32)     # fresh weights each run; printed on failure


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("llama") / "tiny.gguf", seed=SEED)


def load(path):
    """Everything the runner checks before loading weights: the file, its tensors and its tokenizer."""
    model = open_llama(path)
    Tokenizer(model.metadata, model.path, model.hparams.n_vocab)
    return model


def refused(path, *words):
    with pytest.raises(ModelFileError) as e:
        load(path)
    for w in words:
        assert w in str(e.value), f"{w!r} not in {e.value}"
    return str(e.value)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_opens_with_the_written_hparams(tmp_path, arch):
    path = write_tiny_llama(tmp_path / "m.gguf", arch=arch, seed=SEED, n_layer=3, n_embd=96, n_head=6, n_head_kv=2,
                            n_ff=160, n_ctx=77, rope_base=5e5, tied=True)
    hp = load(path).hparams
    assert (hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.n_ff, hp.n_ctx_train) == (arch, 3, 96, 6, 2,
                                                                                                     160, 77)
    assert (hp.head_dim, hp.n_rot, hp.n_gqa, hp.rope_base) == (16, 16, 3, 5e5)
    assert hp.rope_type == ("neox" if arch == "qwen2" else "norm") and hp.qkv_bias == (arch == "qwen2")


def test_refuses_another_architecture(tmp_path):
    refused(write_tiny_llama(tmp_path / "m.gguf", arch="falcon"), "general.architecture='falcon'", "llama", "qwen2", "gemma3", "phi3")


@pytest.mark.parametrize("key", ["llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                                 "llama.feed_forward_length", "llama.attention.layer_norm_rms_epsilon",
                                 "llama.context_length", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"])
def test_refuses_a_missing_key(tmp_path, key):
    refused(write_tiny_llama(tmp_path / "m.gguf", metadata={key: None}), key)


@pytest.mark.parametrize("key,value,words", [
    ("llama.attention.head_count_kv", 3, ["4 query heads", "3 KV head"]),
    ("llama.rope.freq_base", -1.0, ["llama.rope.freq_base", "finite number > 0"]),
    ("llama.block_count", 7, ["no tensor 'blk.2.attn_norm.weight'"]),
    ("llama.block_count", 10**6, ["block_count=1000000", "only"]),
    ("llama.feed_forward_length", 256, ["'blk.0.ffn_gate.weight' has shape (64, 128)", "expected (64, 256)"]),
    ("llama.expert_count", 8, ["llama.expert_used_count=0", "expected 1 to llama.expert_count=8"]),
    ("llama.rope.scaling.type", "longrope", ["'longrope' is not supported"]),
    ("tokenizer.ggml.model", "bert", ["tokenizer.ggml.model is 'bert'"]),
    ("tokenizer.ggml.pre", "nonesuch", ["tokenizer.ggml.pre='nonesuch'"]),
    ("tokenizer.ggml.bos_token_id", 100000, ["bos_token_id", "below 320"]),
])
def test_refuses_bad_metadata(tmp_path, key, value, words):
    refused(write_tiny_llama(tmp_path / "m.gguf", metadata={key: value}), *words)


def test_refuses_a_missing_or_unexpected_tensor(tmp_path):
    refused(write_tiny_llama(tmp_path / "a.gguf", skip=("blk.1.ffn_up.weight",)), "no tensor 'blk.1.ffn_up.weight'")
    refused(write_tiny_llama(tmp_path / "b.gguf", skip=("token_embd.weight",)), "no tensor 'token_embd.weight'")
    refused(write_tiny_llama(tmp_path / "c.gguf", arch="qwen2", skip=("blk.0.attn_k.bias",)), "'blk.0.attn_k.bias'")
    # a qwen2 file's biases are not part of a llama: written with the llama keys, they are unexpected
    path = write_tiny_llama(tmp_path / "d.gguf", arch="qwen2", metadata={"general.architecture": None})
    assert load(path).hparams.qkv_bias


def test_tied_output_and_types(tmp_path):
    model = load(write_tiny_llama(tmp_path / "m.gguf", tied=True, types={"attn_q": Q.Q5_0, "ffn_up": Q.Q4_1,
                                                                          "attn_v": Q.F16, "ffn_down": Q.Q5_1}))
    assert "output.weight" not in model.tensors
    assert model.tensors["blk.1.attn_q.weight"].tensor_type == Q.Q5_0
    assert model.tensors["blk.0.attn_v.weight"].tensor_type == Q.F16


def _type_field_offset(path, name):
    reader, _ = read_gguf(path)
    rt = next(t for t in reader.tensors if t.name == name)
    return rt.field.parts[4].ctypes.data - reader.data.ctypes.data


@pytest.mark.parametrize("type_id,words", [(99, ["'blk.0.attn_q.weight'", "type id 99"]),
                                           (int(Q.IQ3_S), ["'blk.0.attn_q.weight'", "type IQ3_S"]),
                                           (int(Q.IQ2_XXS), ["'blk.0.attn_q.weight'", "rows of 64", "IQ2_XXS"]),
                                           (int(Q.Q4_1), ["'blk.0.attn_q.weight'", "starts at byte"])])
def test_refuses_an_unknown_or_unsupported_tensor_type(tiny, tmp_path, type_id, words):
    path = tmp_path / "m.gguf"
    shutil.copy(tiny, path)
    offset = _type_field_offset(path, "blk.0.attn_q.weight")      # Q4_0 in the file
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.uint32(type_id).tobytes())
    refused(path, *words)


def test_refuses_non_gguf_and_missing_files(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGML" + bytes(100))
    refused(tmp_path / "x.gguf", "not a GGUF file")
    refused(tmp_path / "none.gguf", "does not exist")
    (tmp_path / "empty.gguf").write_bytes(b"")
    refused(tmp_path / "empty.gguf", "not a GGUF file")


def _outcome(path):
    try:
        load(path)
        return "accepted"
    except ModelFileError:
        return "refused"


def test_fuzz_truncations_are_refused(tiny, tmp_path):
    reader, _ = read_gguf(tiny)
    data_end = max(rt.data_offset + int(rt.n_bytes) for rt in reader.tensors)
    blob = tiny.read_bytes()
    rng = np.random.default_rng(SEED)
    cuts = np.concatenate([rng.integers(0, reader.data_offset, 30), rng.integers(reader.data_offset, data_end, 20),
                           [data_end - 1, 4, 8, 23]])
    path = tmp_path / "cut.gguf"
    with deadline(120):
        for cut in cuts:
            path.write_bytes(blob[:cut])
            assert _outcome(path) == "refused", f"a file cut at byte {cut} of {len(blob)} was accepted (seed {SEED})"


def test_fuzz_byte_flips_are_refused_or_harmless(tiny, tmp_path):
    """Flips in the header, metadata and tensor table: every file is refused with ModelFileError or passes every
    check (a flipped byte inside a token's text or a float can leave a valid file); no other exception, no hang.
    Flips inside tensor data cannot be told from weights, so they are left out."""
    reader, _ = read_gguf(tiny)
    blob = bytearray(tiny.read_bytes())
    rng = np.random.default_rng(SEED)
    path = tmp_path / "flip.gguf"
    outcomes = []
    with deadline(240):
        for _ in range(150):
            mutated = bytearray(blob)
            for pos in rng.integers(0, reader.data_offset, rng.integers(1, 4)):
                mutated[pos] ^= int(rng.integers(1, 256))
            path.write_bytes(bytes(mutated))
            outcomes.append(_outcome(path))     # any other exception fails the test with its traceback
    assert outcomes.count("refused") > len(outcomes) // 4, f"only {outcomes.count('refused')} refused (seed {SEED})"


def test_a_huge_array_length_is_refused_quickly(tiny, tmp_path):
    """The stock gguf reader loops over a corrupt array length (reading nothing past the end); ours stops."""
    reader, _ = read_gguf(tiny)
    field = reader.fields["tokenizer.ggml.token_type"]
    length_offset = field.parts[4].ctypes.data - reader.data.ctypes.data      # key len, key, type, item type, count
    blob = bytearray(tiny.read_bytes())
    blob[length_offset + 7] = 0x01          # the count's top byte: 2**56 + n entries
    path = tmp_path / "huge.gguf"
    path.write_bytes(bytes(blob))
    with deadline(20):
        refused(path, "truncated or corrupt", "counts 72057594037928", "items; at most")
    assert os.path.getsize(path) == len(blob)
