"""ggpy.models.llama's SentencePiece tokenizer (tokenizer.ggml.model = llama: Llama 2, Mistral, Mixtral, Phi-3, Gemma):
equal to a float-free Python transcription of llama.cpp's llm_tokenizer_spm (written here, on a vocabulary trained
with `tokenizers`), to sentencepiece itself (a byte-fallback BPE model it trains, converted as convert_hf_to_gguf.py
converts one) and to llama.cpp's tokenization of the same files (where llama-cpp-python is installed); special and
user-defined tokens whole; Phi-3's stripped whitespace; decoding and streaming of byte-fallback pieces."""
import heapq

import gguf
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from llama_cpp_ref import llama_cpp

from ggpy import ModelFileError
from ggpy.models.llama.gguf_file import read_gguf
from ggpy.models.llama.tokenizer import Tokenizer

SEED = int(np.random.SeedSequence().entropy % 2**32)
T = gguf.TokenType
SPACE = "\u2581"
WORDS = ("the of and to in is it that was for on are with as at be this have from or had by hot word but what some "
         "can out other were all there when up use your how said each she which their time will way about many then "
         "Haus Straße über schön Größe café naïve élève français où très déjà garçon мир привет спасибо хорошо "
         "Москва καλημέρα ελληνικά 日本 日本語 東京 中文 你好 世界 한국어 안녕하세요 مرحبا العربية हिन्दी नमस्ते "
         "2024 3.14 42 1999 100000 don't I'm we've it's x=1; f(x) {a: b} <tag> --help C++ e-mail").split()
PIECES = (WORDS + list(" \n\t.,!?'\"-_()[]{}<>|/\\@#$%^&*~`0123456789") + ["  ", "   ", "\n\n", "\r\n", "🤖", "👩‍👩‍👧",
          "🙂", "\u00a0", "\u3000", "\u200b", "ß", "ﬁ", "Ω", "𝔘", "̈", "<s>", "</s>", "<unk>", "<|end|>", "<start_of_turn>",
          "<end_of_turn>", "<|endoftext|>", "<0x41>", SPACE, SPACE * 2, "<tag>", "  \n"])
FIXED = ["Hello world! 12345", "  lead", "trail   ", " ", "", "\n\n\nlines\r\n", "héllo 日本語 🤖 👩‍👩‍👧",
         "<s>user\nHi</s>", "a<|end|> b<|end|>\n c", "<start_of_turn>user\nHi<end_of_turn>\n", "x  y   z", "▁▁a ▁b",
         "1,000,000 and 2024-11-24", "ÅÄÖ åäö ß ﬁ 𝔘", "<0x41><0x0A> <unk>", "Привет, мир! Καλημέρα κόσμε. 안녕하세요"]


def corpus(n_lines=600, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 12))) for _ in range(n_lines)]


def texts(n=300, seed=SEED):
    rng = np.random.default_rng(seed)
    return FIXED + ["".join(rng.choice(PIECES, size=rng.integers(1, 30))) for _ in range(n)]


# --- vocabularies, as convert_hf_to_gguf.py writes them --------------------------------------------------------------

def trained_pieces(vocab_size=600):
    """(piece, score) of a SentencePiece-style BPE trained with `tokenizers` on corpus(): U+2581 for spaces, scores
    falling with the merge order (as a sentencepiece BPE model's are); no emoji or rare characters."""
    from tokenizers import SentencePieceBPETokenizer
    tok = SentencePieceBPETokenizer(add_prefix_space=True)
    tok.train_from_iterator(corpus(), vocab_size=vocab_size, min_frequency=2, special_tokens=[], show_progress=False)
    by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return [(p, -float(i)) for i, (p, _) in enumerate(by_id)]


def llama2_layout(pieces, control=(), user_defined=(), n_unused=0):
    """Llama 2's layout: <unk> <s> </s>, the 256 <0xNN> byte tokens, the pieces; then added control tokens and
    user-defined ones (score -1000, as the converter gives added tokens) and `n_unused` [PADi] padding tokens (as
    it pads Phi-3's vocabulary). -> (tokens, scores, types)"""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256
    scores = [0.0] * len(tokens)
    for p, s in pieces:
        if p not in tokens:
            tokens.append(p), scores.append(s), types.append(T.NORMAL)
    for group, kind in ((control, T.CONTROL), (user_defined, T.USER_DEFINED)):
        tokens += list(group)
        scores += [-1000.0] * len(group)
        types += [kind] * len(group)
    tokens += [f"[PAD{len(tokens) + i}]" for i in range(n_unused)]
    return tokens, scores + [-1000.0] * n_unused, types + [T.UNUSED] * n_unused


def write_vocab(path, tokens, scores, types, name="tiny", **keys):
    """A vocab-only llama GGUF (hyper-parameters llama.cpp reads even for vocab_only, no tensors); `keys` are
    tokenizer.ggml.* keys (add_bos_token=..., add_space_prefix=..., eot_token_id=...)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    for add, value in ((w.add_context_length, 256), (w.add_embedding_length, 64), (w.add_block_count, 1),
                       (w.add_feed_forward_length, 128), (w.add_head_count, 4), (w.add_layer_norm_rms_eps, 1e-5)):
        add(value)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for key, value in keys.items():
        if isinstance(value, bool):
            w.add_bool(f"tokenizer.ggml.{key}", value)
        else:
            w.add_uint32(f"tokenizer.ggml.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


def tokenizer_of(path) -> Tokenizer:
    _, metadata = read_gguf(path)
    return Tokenizer(metadata, str(path))


# --- llama.cpp's llm_tokenizer_spm, transcribed (the reference that needs neither llama.cpp nor sentencepiece) -------

def reference_spm(text, tokens, scores, types, add_space_prefix=True, parse_special=True, rstrip=()):
    """llama_tokenize of an SPM vocabulary without BOS: special tokens cut out longest first (llama.cpp's
    tokenizer_st_partition; `rstrip` ones take the ASCII whitespace after them), a space before every piece of text
    that starts the text or follows a special token, spaces as U+2581, then the adjacent pair whose concatenation
    is the token of highest score merged first (equal scores: the leftmost), characters no token covers as bytes."""
    ids = {t: i for i, t in enumerate(tokens)}
    special = sorted((i for i, k in enumerate(types) if k == T.USER_DEFINED
                      or (parse_special and k in (T.CONTROL, T.UNKNOWN))), key=lambda i: -len(tokens[i]))
    fragments = [text] if text else []
    for sid in special:
        out = []
        for f in fragments:
            while isinstance(f, str) and tokens[sid] in f:
                left, f = f.split(tokens[sid], 1)
                out += ([left] if left else []) + [sid]
                if tokens[sid] in rstrip:
                    f = f.lstrip(" \t\n\v\f\r")
            if f != "":
                out.append(f)
        fragments = out
    result, after_special = [], True
    for f in fragments:
        if isinstance(f, int):
            result.append(f)
            after_special = True
            continue
        result += _spm_merge(((" " if add_space_prefix and after_special else "") + f).replace(" ", SPACE), ids,
                             scores)
        after_special = False
    return result


def _spm_merge(text, ids, scores):
    symbols = list(text)
    alive = [True] * len(symbols)
    nxt, prv = list(range(1, len(symbols))) + [-1], list(range(-1, len(symbols) - 1))
    queue = []

    def push(left, right):
        if left >= 0 and right >= 0 and symbols[left] + symbols[right] in ids:
            joined = symbols[left] + symbols[right]
            heapq.heappush(queue, (-scores[ids[joined]], left, right, joined))

    for i in range(1, len(symbols)):
        push(i - 1, i)
    while queue:
        _, left, right, joined = heapq.heappop(queue)
        if not (alive[left] and alive[right] and nxt[left] == right and symbols[left] + symbols[right] == joined):
            continue
        symbols[left], alive[right] = joined, False
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    out, i = [], 0
    while i != -1 and symbols:
        s = symbols[i]
        out += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
        i = nxt[i]
    return out


# --- tests ------------------------------------------------------------------------------------------------------------

RUNS = [(SPACE * k, 0.0) for k in range(2, 9)] + [("\n" * k, 0.0) for k in range(1, 5)] + [("\t", 0.0), ("\t\t", 0.0)]
PHI3_RSTRIP = ("<start_of_turn>", "<end_of_turn>", "<|end|>", "<tag>", "</s>")       # llama.cpp's rule for Phi-3


def _vocab(tmp_path, kind="llama"):
    """(tokens, scores, types, path) of a trained vocabulary in Llama 2's layout with added tokens: "gemma" has no
    prefix space, whitespace runs as normal tokens of equal score 0 (as Gemma's user-defined pieces convert) and
    user-defined ones with spaces, and an EOT id; "phi3" is named Phi-3 (its special tokens strip whitespace)."""
    control = ["<start_of_turn>", "<end_of_turn>", "<|end|>", "<|endoftext|>"]      # llama.cpp needs the last for Phi-3
    gemma = kind == "gemma"
    tokens, scores, types = llama2_layout(trained_pieces() + RUNS * gemma, control,
                                          ["<tag>", "  x", "\n" * 5, "   "] if gemma else ["<tag>"], 4 * (kind == "phi3"))
    keys = {"add_space_prefix": False, "eot_token_id": tokens.index("<end_of_turn>")} if gemma else {}
    name = "Phi-3 Mini 4k Instruct" if kind == "phi3" else "tiny"
    return tokens, scores, types, write_vocab(tmp_path / f"{kind}.gguf", tokens, scores, types, name=name, **keys)


@pytest.mark.parametrize("kind", ["llama", "gemma", "phi3"])
def test_equals_the_transcribed_llama_cpp_algorithm(tmp_path, kind):
    tokens, scores, types, path = _vocab(tmp_path, kind)
    tok = tokenizer_of(path)
    assert tok.add_bos and tok.add_space_prefix == (kind != "gemma")
    rstrip = PHI3_RSTRIP if kind == "phi3" else ()
    for text in texts():
        for special in (True, False):
            want = reference_spm(text, tokens, scores, types, kind != "gemma", special, rstrip)
            assert tok.encode(text, add_special=False, parse_special=special) == want, f"{text!r} {special} ({SEED})"
    assert tok.encode("", add_special=True) == [1] and tok.encode("") == [1]
    ends = {2} | {tokens.index(t) for t in ("<end_of_turn>", "<|end|>", "<|endoftext|>")}
    assert tok.eog_ids == ends


def sentencepiece_vocab(tmp_path, add_dummy_prefix=True, model_type="bpe"):
    """A byte-fallback BPE (or unigram) model trained by sentencepiece on corpus() (identity normalization, spaces
    kept), converted as convert_hf_to_gguf.py's _create_vocab_sentencepiece converts one. -> (processor, path)"""
    import io
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), model_writer=model, model_type=model_type,
                                   vocab_size=800 if model_type == "bpe" else 450, byte_fallback=True, normalization_rule_name="identity",
                                   add_dummy_prefix=add_dummy_prefix, remove_extra_whitespaces=False,
                                   character_coverage=0.995, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.vocab_size()
    types = [T.UNKNOWN if sp.is_unknown(i) else T.CONTROL if sp.is_control(i) else T.UNUSED if sp.is_unused(i)
             else T.BYTE if sp.is_byte(i) else T.NORMAL for i in range(n)]
    path = write_vocab(tmp_path / f"sp{int(add_dummy_prefix)}{model_type}.gguf", [sp.id_to_piece(i) for i in range(n)],
                       [sp.get_score(i) for i in range(n)], types, add_space_prefix=add_dummy_prefix)
    return sp, path


@pytest.mark.parametrize("prefix", [True, False])
def test_equals_sentencepiece(tmp_path, prefix):
    sp, path = sentencepiece_vocab(tmp_path, prefix)
    tok = tokenizer_of(path)
    for text in texts():
        ids = tok.encode(text, add_special=False, parse_special=False)
        assert ids == sp.encode(text), f"{text!r} ({SEED})"
        assert tok.decode(ids) == sp.decode(ids) == text.replace(SPACE, " ")       # U+2581 is a space to both


def _pieces_of_llama_cpp(llm, lowlevel, n_tokens, special):
    buf = bytes(64)
    out = []
    for i in range(n_tokens):
        n = lowlevel.llama_token_to_piece(llm._model.vocab, i, buf, len(buf), 0, special)
        out.append(buf[:n])
    return out


def _detokenize_of_llama_cpp(llm, lowlevel, ids, special):
    arr = (lowlevel.llama_token * len(ids))(*ids)
    buf = bytes(4096)
    n = lowlevel.llama_detokenize(llm._model.vocab, arr, len(ids), buf, len(buf), False, special)
    return buf[:n].decode("utf-8", errors="replace")


def _equal_to_llama_cpp(path, n):
    llm = llama_cpp(path, vocab_only=True)          # skips where llama-cpp-python is not installed
    import llama_cpp as lowlevel
    tok = tokenizer_of(path)
    for special in (True, False):
        assert [tok.token_bytes(i, special) for i in range(tok.n_vocab)] == \
            _pieces_of_llama_cpp(llm, lowlevel, tok.n_vocab, special)
    for text in texts(n):
        for special in (True, False):
            ours = tok.encode(text, parse_special=special)
            assert ours == llm.tokenize(text.encode(), add_bos=True, special=special), f"{text!r} {special} ({SEED})"
            assert tok.decode(ours, special) == _detokenize_of_llama_cpp(llm, lowlevel, ours, special)
            assert tok.decode(ours[1:], special) == _detokenize_of_llama_cpp(llm, lowlevel, ours[1:], special)


@pytest.mark.parametrize("kind", ["llama", "gemma", "phi3"])
def test_equals_llama_cpp(tmp_path, kind):
    _equal_to_llama_cpp(_vocab(tmp_path, kind)[3], 300)


@pytest.mark.parametrize("prefix,model_type", [(True, "bpe"), (False, "bpe"), (True, "unigram")])
def test_equals_llama_cpp_on_a_sentencepiece_model(tmp_path, prefix, model_type):
    _equal_to_llama_cpp(sentencepiece_vocab(tmp_path, prefix, model_type)[1], 300)


def test_unigram_vocabulary_is_merged_as_llama_cpp_merges_it(tmp_path):
    """llama.cpp merges a unigram model's pieces by score too (not sentencepiece's Viterbi): the transcription."""
    _, path = sentencepiece_vocab(tmp_path, True, "unigram")
    _, metadata = read_gguf(path)
    tokens, scores = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.scores"]
    types = [T(k) for k in metadata["tokenizer.ggml.token_type"]]
    tok = tokenizer_of(path)
    for text in texts():
        want = reference_spm(text, tokens, scores, types, True, False)
        assert tok.encode(text, add_special=False, parse_special=False) == want, f"{text!r} ({SEED})"


def test_decode_and_stream_give_the_text_back(tmp_path):
    tokens, scores, types = llama2_layout(trained_pieces())
    tok = tokenizer_of(write_vocab(tmp_path / "v.gguf", tokens, scores, types))
    for text in texts(200):
        ids = tok.encode(text, add_special=False, parse_special=False)
        plain = text.replace(SPACE, " ")                            # U+2581 in the text comes back as a space
        assert tok.decode(ids) == plain, f"{text!r} ({SEED})"
        stream = tok.stream()
        pieces = [stream.push(i) for i in ids] + [stream.flush()]
        assert "".join(pieces) == (" " + plain if text else "")     # the prefix space is the model's text
        assert "\ufffd" not in "".join(pieces)                      # no character is cut in two on the way
    emoji = tok.encode("🤖", add_special=False)
    assert [tokens[i] for i in emoji] == [SPACE, "<0xF0>", "<0x9F>", "<0xA4>", "<0x96>"]
    stream = tok.stream()
    assert [stream.push(i) for i in emoji] == [" ", "", "", "", "🤖"]


@pytest.mark.parametrize("key,value,words", [       # value: of the number of tokens
    ("tokenizer.ggml.model", lambda n: "bert", ["tokenizer.ggml.model is 'bert'", "'llama' (SentencePiece)"]),
    ("tokenizer.ggml.scores", lambda n: [0.0] * 5, ["tokenizer.ggml.scores has 5 entries"]),
    ("tokenizer.ggml.scores", lambda n: [float("nan")] * n, ["tokenizer.ggml.scores", "NaN"]),
    ("tokenizer.ggml.scores", lambda n: ["1"] * n, ["tokenizer.ggml.scores", "not a list of float or int"]),
    ("tokenizer.ggml.token_type", lambda n: [int(T.BYTE)] * n, ["has the byte type but is not <0xNN>"]),
    ("tokenizer.ggml.add_space_prefix", lambda n: 1, ["add_space_prefix", "true or false"]),
    ("tokenizer.ggml.unknown_token_id", lambda n: n, ["unknown_token_id", "below"]),
])
def test_refuses_bad_metadata(tmp_path, key, value, words):
    tokens, scores, types = llama2_layout(trained_pieces(300))
    _, metadata = read_gguf(write_vocab(tmp_path / "v.gguf", tokens, scores, types))
    metadata[key] = value(len(tokens))
    with pytest.raises(ModelFileError) as e:
        Tokenizer(metadata, "v.gguf")
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value), str(e.value)


def test_integer_scores_are_scores(tmp_path):
    tokens, scores, types = llama2_layout(trained_pieces())
    _, metadata = read_gguf(write_vocab(tmp_path / "v.gguf", tokens, scores, types))
    as_float = Tokenizer(metadata)
    as_int = Tokenizer({**metadata, "tokenizer.ggml.scores": [int(x) for x in scores]})
    for text in texts(50):
        assert as_int.encode(text) == as_float.encode(text)
