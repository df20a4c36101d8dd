"""A small random llama-family GGUF for tests: `write_tiny_llama(path, ...)`.

Written with gguf.GGUFWriter as llama.cpp's converter writes a real model: `{arch}.*` hyper-parameters, a byte-level
BPE tokenizer in the metadata (trained here with Hugging Face `tokenizers` on seeded random text, so its merges
are real ones), a ChatML chat template, F32 norms (and q/k/v biases for qwen2), and matrices quantized with
gguf.quants (Q8_0 and Q4_0 by default). `tiny_tokenizer(pre)` is the trained tokenizer itself, configured as
Hugging Face configures that pre-tokenizer: an independent reference for the tokenizer built from the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
DEFAULT_TYPES = {"token_embd": Q.Q8_0, "output": Q.Q8_0, "attn_q": Q.Q4_0, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0,
                 "attn_output": Q.Q4_0, "ffn_gate": Q.Q4_0, "ffn_up": Q.Q8_0, "ffn_down": Q.Q4_0}
WORDS = ("the a of and to in is it that was he for on are with as his they be at one have this from or had by "
         "hot word but what some we can out other were all there when up use your how said an each she which do "
         "their time if will way about many then them write would like so these her long make thing see him two "
         "has look more day could go come did number sound no most people my over know water than call first "
         "who may down side been now find don't I'm we've it's 2024 3.14 42 1999 café naïve ünïcode 日本 🙂").split()


def _pre_tokenizer(pre: str):
    from tokenizers import Regex, pre_tokenizers
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":           # SmolLM's tokenizer.json: Digits(individual_digits) then ByteLevel
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre == "gpt-2":
        return byte_level
    if pre == "qwen2":            # Qwen2's tokenizer.json: its regex, then ByteLevel without one
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}"
                                       r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise ValueError(f"no tiny tokenizer for pre-tokenizer {pre!r}")


def corpus(n_lines: int = 400, seed: int = 0) -> list:
    """Seeded random lines of WORDS."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(n_lines)]


def tiny_tokenizer(pre: str = "smollm", vocab_size: int = 320):
    """A byte-level BPE trained on `corpus()`, with the pre-tokenizer Hugging Face uses for `pre`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def _vocab(pre: str, vocab_size: int) -> tuple:
    """(tokens by id, token types, merges as 'a b' strings) of the trained tokenizer."""
    tok = tiny_tokenizer(pre, vocab_size)
    model = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    types = [gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def _quantized(w: np.ndarray, qtype) -> tuple:
    return (gguf.quants.quantize(w.astype(np.float32), qtype), qtype)


def write_tiny_llama(path, *, arch: str = "llama", seed: int = 0, n_layer: int = 2, n_embd: int = 64,
                     n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128, n_ctx: int = 256, vocab_size: int = 320,
                     types: dict | None = None, tied: bool = False, pre: str | None = None, add_bos: bool = True,
                     rope_base: float = 10000.0, metadata: dict | None = None, skip: tuple = (),
                     n_vocab: int | None = None, alignment: int | None = None,
                     rope_freqs: np.ndarray | None = None) -> Path:
    """Write a random `arch` ("llama" or "qwen2") GGUF to `path` and return it. `types` maps matrix names
    (token_embd, output, attn_q, ..., ffn_down) to GGML types over DEFAULT_TYPES; `tied` leaves out output.weight;
    `metadata` adds or replaces keys (value None removes one); `skip` leaves out the named tensors; `n_vocab` pads
    the trained vocabulary with unused tokens to that size (a real model's embedding and output sizes); `alignment`
    writes general.alignment and pads the tensor data to it (gguf's add_custom_alignment); `rope_freqs` (head_dim / 2
    frequency divisors) is written as rope_freqs.weight (llama3 rope scaling, as convert_hf_to_gguf writes it)."""
    rng = np.random.default_rng(seed)
    types = {**DEFAULT_TYPES, **(types or {})}
    pre = pre or ("qwen2" if arch == "qwen2" else "smollm")
    tokens, token_types, merges = _vocab(pre, vocab_size)
    pad = max(0, (n_vocab or 0) - len(tokens))
    tokens, token_types = tokens + [f"<unused{i}>" for i in range(pad)], token_types + [gguf.TokenType.UNUSED] * pad
    head_dim = n_embd // n_head
    keys = {f"{arch}.block_count": n_layer, f"{arch}.context_length": n_ctx, f"{arch}.embedding_length": n_embd,
            f"{arch}.feed_forward_length": n_ff, f"{arch}.attention.head_count": n_head,
            f"{arch}.attention.head_count_kv": n_head_kv, f"{arch}.rope.freq_base": rope_base,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-5, f"{arch}.rope.dimension_count": head_dim,
            f"{arch}.vocab_size": len(tokens), "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": token_types,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.add_bos_token": add_bos, "tokenizer.chat_template": CHAT_TEMPLATE}
    keys.update(metadata or {})

    def matrix(rows, cols, name):
        return _quantized(rng.standard_normal((rows, cols)) / np.sqrt(cols), types[name])

    def vector(n, scale=0.1, offset=0.0):
        return (offset + scale * rng.standard_normal(n)).astype(np.float32), Q.F32

    q, kv = n_head * head_dim, n_head_kv * head_dim
    tensors = {"token_embd.weight": _quantized(rng.standard_normal((len(tokens), n_embd)), types["token_embd"])}
    for i in range(n_layer):
        b = f"blk.{i}."
        tensors[b + "attn_norm.weight"] = vector(n_embd, offset=1.0)
        tensors[b + "attn_q.weight"] = matrix(q, n_embd, "attn_q")
        tensors[b + "attn_k.weight"] = matrix(kv, n_embd, "attn_k")
        tensors[b + "attn_v.weight"] = matrix(kv, n_embd, "attn_v")
        if arch == "qwen2":
            tensors.update({b + "attn_q.bias": vector(q), b + "attn_k.bias": vector(kv), b + "attn_v.bias": vector(kv)})
        tensors[b + "attn_output.weight"] = matrix(n_embd, q, "attn_output")
        tensors[b + "ffn_norm.weight"] = vector(n_embd, offset=1.0)
        tensors[b + "ffn_gate.weight"] = matrix(n_ff, n_embd, "ffn_gate")
        tensors[b + "ffn_up.weight"] = matrix(n_ff, n_embd, "ffn_up")
        tensors[b + "ffn_down.weight"] = matrix(n_embd, n_ff, "ffn_down")
    tensors["output_norm.weight"] = vector(n_embd, offset=1.0)
    if rope_freqs is not None:
        tensors["rope_freqs.weight"] = (np.asarray(rope_freqs, np.float32), Q.F32)
    if not tied:
        tensors["output.weight"] = matrix(len(tokens), n_embd, "output")

    writer = gguf.GGUFWriter(str(path), arch)
    if alignment:
        writer.add_custom_alignment(alignment)
    for key, value in keys.items():
        if value is not None and key != "general.architecture":
            writer.add_key_value(key, value, _value_type(value), _array_type(value))
    for name, (data, qtype) in tensors.items():
        if name not in skip:
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _value_type(value):
    T = gguf.GGUFValueType
    if isinstance(value, list):
        return T.ARRAY
    return {bool: T.BOOL, int: T.UINT32, float: T.FLOAT32, str: T.STRING}[type(value)]


def _array_type(value):
    if not isinstance(value, list):
        return None
    return gguf.GGUFValueType.INT32 if isinstance(value[0], int) else gguf.GGUFValueType.STRING
