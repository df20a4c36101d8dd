"""ggpy.models.llama's tokenizer: equal to Hugging Face's own configuration of each pre-tokenizer (trained on the tiny
vocabulary) and to llama.cpp's tokenization of the same file (tiny files and SmolLM2, when llama-cpp-python is
installed); BOS/EOS as the file says; special tokens whole; decoding byte-level, streamed across split UTF-8."""
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"
pytest.importorskip("jinja2")

from llama_cpp_ref import llama_cpp, smollm_path
from llama_tiny import CHAT_TEMPLATE, tiny_tokenizer, write_tiny_llama

from ggpy.models.llama.chat import ChatTemplateError, render_chat
from ggpy.models.llama.gguf_file import read_gguf
from ggpy.models.llama.tokenizer import Tokenizer

SEED = int(np.random.SeedSequence().entropy % 2**32)
PIECES = (list("abcdefgh ABC  0123456789\n\t.,!?'\"-_()[]{}<>|/\\@#$%^&*~`") + ["é", "日本", "🤖", "’", "\u200b", "\u00a0",
          "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|im_", " the", " people", "'s", "'LL", "\r\n", "   ", "ß",
          "👩‍👩‍👧", "2024", "3.14"])
FIXED = ["Hello world! 12345 <|im_start|>user\nHi<|im_end|>", "I'm   here\t\n\n  x", "héllo 日本語 🤖", "  lead",
         "trail   ", "\n\n\nlines\r\n", "x=3.14159; y = 2*x**2 // 7", "don't WON'T we'Ve", "", " ", "a\u00a0b\u2003c",
         "1,000,000 and 2024-11-24", "ok<|im_end|>ok<|im_end", "ÅÄÖ åäö ß ﬁ"]


def texts(n=300, seed=SEED):
    rng = np.random.default_rng(seed)
    return FIXED + ["".join(rng.choice(PIECES, size=rng.integers(1, 40))) for _ in range(n)]


def tokenizer_of(path) -> Tokenizer:
    _, metadata = read_gguf(path)
    return Tokenizer(metadata, str(path))


@pytest.mark.parametrize("pre,arch", [("smollm", "llama"), ("gpt-2", "llama"), ("qwen2", "qwen2")])
def test_equals_hugging_face_configuration_of_the_pre_tokenizer(tmp_path, pre, arch):
    ours = tokenizer_of(write_tiny_llama(tmp_path / "m.gguf", arch=arch, pre=pre, add_bos=False))
    hf = tiny_tokenizer(pre)
    for text in texts():
        assert ours.encode(text) == hf.encode(text).ids, f"{text!r} (seed {SEED})"


def test_bos_and_eos_as_the_file_says(tmp_path):
    with_bos = tokenizer_of(write_tiny_llama(tmp_path / "a.gguf", add_bos=True))
    without = tokenizer_of(write_tiny_llama(tmp_path / "b.gguf", add_bos=False,
                                            metadata={"tokenizer.ggml.add_eos_token": True}))
    body = without.encode("the day", add_special=False)
    assert with_bos.encode("the day") == [with_bos.bos_id] + body
    assert without.encode("the day") == body + [without.eos_id]
    assert with_bos.encode("the day", add_special=False) == body


def test_special_tokens_are_whole_unless_parse_special_is_off(tmp_path):
    tok = tokenizer_of(write_tiny_llama(tmp_path / "m.gguf", add_bos=False))
    im_start = tok.tokens.index("<|im_start|>")
    assert tok.encode("<|im_start|>user") == [im_start] + tok.encode("user")
    as_text = tok.encode("<|im_start|>user", parse_special=False)
    assert im_start not in as_text and tok.decode(as_text) == "<|im_start|>user"
    assert tok.eog_ids == {tok.tokens.index("<|endoftext|>"), tok.tokens.index("<|im_end|>")}


def test_decode_and_stream_give_the_text_back(tmp_path):
    tok = tokenizer_of(write_tiny_llama(tmp_path / "m.gguf"))
    for text in texts(100):
        ids = tok.encode(text, add_special=False)
        assert tok.decode(ids, special=True) == text
        stream = tok.stream()
        pieces = [stream.push(i) for i in ids] + [stream.flush()]
        assert "".join(pieces).replace("<|im_end|>", "").replace("<|im_start|>", "").replace("<|endoftext|>", "") \
            == text.replace("<|im_end|>", "").replace("<|im_start|>", "").replace("<|endoftext|>", "")
        assert "\ufffd" not in "".join(pieces)       # no character is cut in two on the way
    emoji = tok.encode("🤖", add_special=False)
    assert len(emoji) == 4 and tok.stream().push(emoji[0]) == ""     # 4 byte tokens: nothing until the last


def test_chat_template_renders_as_transformers_does():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(CHAT_TEMPLATE, messages) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                                    "<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat("{{ bos_token }}{{ messages[0]['content'] | tojson }}", messages[1:], bos_token="<s>") \
        == '<s>"Hi"'
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_chat(None, messages)
    with pytest.raises(ChatTemplateError, match="only user"):
        render_chat("{{ raise_exception('only user') }}", messages)
    with pytest.raises(ChatTemplateError, match="failed"):
        render_chat("{% for %}", messages)


def _equal_to_llama_cpp(path, n):
    tok = tokenizer_of(path)
    llm = llama_cpp(path, vocab_only=True)
    for text in texts(n):
        for special in (True, False):
            ours = tok.encode(text, parse_special=special)
            assert ours == llm.tokenize(text.encode(), add_bos=True, special=special), f"{text!r} {special} ({SEED})"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_equals_llama_cpp_on_tiny_files(tmp_path, arch):
    _equal_to_llama_cpp(write_tiny_llama(tmp_path / "m.gguf", arch=arch), 300)


def test_equals_llama_cpp_on_smollm2():
    _equal_to_llama_cpp(smollm_path(), 1000)
