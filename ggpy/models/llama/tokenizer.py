"""The tokenizer of a GGUF file (tokenizer.ggml.*), built with Hugging Face `tokenizers` to match llama.cpp.

Both of llama.cpp's tokenizers first cut special tokens (CONTROL, USER_DEFINED, UNKNOWN types) out of the text as
whole tokens (here: an AddedVocabulary). Then:
- BPE ("gpt2"): the rest is split by the regular expressions of the file's pre-tokenizer (tokenizer.ggml.pre,
  applied one after the other as llama.cpp's llm_tokenizer_bpe does), mapped to GPT-2's byte-level alphabet and
  merged by rank. Here: Split pre-tokenizers with the same regular expressions, ByteLevel without its own regex,
  and a BPE model of the file's vocabulary and merges.
- SentencePiece ("llama"): each piece of text between special tokens gets a space in front
  (tokenizer.ggml.add_space_prefix), its spaces become U+2581, and its characters are merged, the adjacent pair
  whose concatenation is the token of highest score first (llm_tokenizer_spm); a character no token covers becomes
  its UTF-8 bytes' <0xNN> tokens. Here: Prepend and Replace normalizers and a byte-fallback BPE model whose merges
  are every split of every token into two tokens, ranked by the joined token's score.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from gguf.vocab import bytes_to_unicode

from ggpy import ModelFileError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6     # llama_token_type

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """How llama.cpp splits text before merging: regular expressions in order, and whether a word found whole in
    the vocabulary skips the merges (ignore_merges), and whether BOS is added when the file does not say."""

    regexes: tuple
    ignore_merges: bool = False
    add_bos: bool = False


_GROUPS = (   # llama-vocab.cpp: tokenizer.ggml.pre names -> LLAMA_VOCAB_PRE_TYPE_* -> regex_exprs
    (("default",), PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"),
     PreTokenizer((LLAMA3,), ignore_merges=True, add_bos=True)),
    (("dbrx", "smaug-bpe"), PreTokenizer((LLAMA3,))),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
     PreTokenizer((r"\p{N}", GPT2))),
    (("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
      "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"), PreTokenizer((GPT2,))),
    (("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"), PreTokenizer((QWEN2,))),
)
PRE_TOKENIZERS = {name: pre for names, pre in _GROUPS for name in names}

# Tokens llama.cpp ends generation on (besides EOS) when the vocabulary has them, and treats as CONTROL.
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
             "<|end_of_text|>", "<end_of_utterance>")
_BYTE_OF_CHAR = {c: b for b, c in bytes_to_unicode().items()}
SPACE = "\u2581"      # SentencePiece's space


class _Metadata:
    """Checked look-ups of tokenizer.ggml.* keys; a failure is a ModelFileError naming the key."""

    def __init__(self, metadata: dict, path: str):
        self.md, self.path = metadata, path

    def fail(self, what: str):
        raise ModelFileError(f"{self.path}: {what}")

    def list_of(self, key: str, kind: type | tuple, required: bool = True) -> list | None:
        v = self.md.get(key)
        if v is None and not required:
            return None
        if not isinstance(v, list) or not all(isinstance(x, kind) and not isinstance(x, bool) for x in v):
            name = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            self.fail(f"metadata '{key}' is {'missing' if v is None else 'not a list of ' + name}")
        return v

    def token_id(self, key: str, n_tokens: int, default: int | None) -> int | None:
        v = self.md.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n_tokens):
            self.fail(f"metadata '{key}' = {v!r}; expected a token id below {n_tokens}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.md.get(key, default)
        if not isinstance(v, bool):
            self.fail(f"metadata '{key}' = {v!r}; expected true or false")
        return v


def _merges(merges: list) -> list:
    """'a b' strings -> (a, b) pairs, split at the first space after the first character (as llama.cpp does)."""
    pairs = []
    for m in merges:
        pos = m.find(" ", 1)
        if pos > 0:
            pairs.append((m[:pos], m[pos + 1:]))
    return pairs


def spm_merges(tokens: list, scores: list) -> list:
    """SentencePiece's merges as BPE's: every (left, right) pair of tokens whose concatenation is a token, the
    joined token of highest score first. llama.cpp takes the leftmost of equal-score pairs; a rank cannot say
    "leftmost", so equal scores rank the longer joined token first (runs of U+2581 grow from the left).
    The lefts of a token are the tokens that are its prefixes: in sorted order, a stack holds them."""
    ids = {t: i for i, t in enumerate(tokens)}
    ranked, prefixes = [], []
    for t in sorted(tokens):
        while prefixes and not t.startswith(prefixes[-1]):
            prefixes.pop()
        i = ids[t]
        ranked += [(-scores[i], -len(t), i, p, t[len(p):]) for p in prefixes if t[len(p):] in ids]
        prefixes.append(t)
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _added(hf, tokens: list, types: list):
    """Special (CONTROL, UNKNOWN) and user-defined tokens, matched whole before the model."""
    from tokenizers import AddedToken
    hf.add_special_tokens([AddedToken(t, normalized=False, special=True)
                           for t, k in zip(tokens, types) if k in (CONTROL, UNKNOWN)])
    hf.add_tokens([AddedToken(t, normalized=False, special=False) for t, k in zip(tokens, types) if k == USER_DEFINED])
    return hf


def _build_hf(tokens: list, merges: list, pre: PreTokenizer):
    from tokenizers import Regex, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=_merges(merges),
                                ignore_merges=pre.ignore_merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return hf


def _build_spm(tokens: list, scores: list, add_space_prefix: bool, unk: str | None):
    from tokenizers import models, normalizers
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=spm_merges(tokens, scores),
                                byte_fallback=True, unk_token=unk))
    hf.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE)] * add_space_prefix
                                         + [normalizers.Replace(" ", SPACE)])
    return hf


def _rstrip_patterns(metadata: dict, tokens: list, types: list) -> dict:
    """{parse_special: regex of the special tokens followed by ASCII whitespace, or None}. llama.cpp's Phi-3 rule
    (general.name holding 'phi-3' or 'phi3'): special tokens but <unk>, <s> and <|endoftext|>, and </s>, swallow
    the whitespace after them (C's isspace: tokenizers' rstrip would take any Unicode space, hence a regex)."""
    name = metadata.get("general.name")
    if not isinstance(name, str) or not any(n in name.lower() for n in ("phi-3", "phi3")):
        return {True: None, False: None}
    keep = {"<unk>", "<s>", "<|endoftext|>"}
    found = {True: [], False: []}
    for t, k in zip(tokens, types):
        if t not in keep and (k in (CONTROL, USER_DEFINED, UNKNOWN) or t == "</s>"):
            found[True].append(t)
            if k == USER_DEFINED:
                found[False].append(t)
    return {parse: re.compile("(" + "|".join(map(re.escape, sorted(ts, key=len, reverse=True))) + ")[ \t\n\v\f\r]+")
            if ts else None for parse, ts in found.items()}


def _byte_values(md: _Metadata, tokens: list, types: list) -> dict:
    """{token id: byte} of the BYTE tokens, whose texts must be <0xNN>."""
    values = {}
    for i, (t, k) in enumerate(zip(tokens, types)):
        if k == BYTE:
            if len(t) != 6 or not t.startswith("<0x") or not t.endswith(">") or \
                    not all(c in "0123456789abcdefABCDEF" for c in t[3:5]):
                md.fail(f"token {i} {t!r} has the byte type but is not <0xNN>")
            values[i] = bytes([int(t[3:5], 16)])
    return values


class Tokenizer:
    """Text <-> token ids as llama.cpp computes them for the GGUF whose metadata is given."""

    def __init__(self, metadata: dict, path: str = "model", n_vocab: int | None = None):
        md = _Metadata(metadata, path)
        model = metadata.get("tokenizer.ggml.model")
        if model not in ("gpt2", "llama"):
            md.fail(f"tokenizer.ggml.model is {model!r}; ggpy's llama runner reads 'gpt2' (byte-level BPE) and "
                    "'llama' (SentencePiece) vocabularies")
        self.spm = model == "llama"
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(md.list_of("tokenizer.ggml.tokens", str))]
        if n_vocab is not None and len(tokens) != n_vocab:
            md.fail(f"the vocabulary has {len(tokens)} tokens but the model's embedding has {n_vocab} rows")
        if len(set(tokens)) != len(tokens):
            md.fail("tokenizer.ggml.tokens holds the same token twice")
        types = md.list_of("tokenizer.ggml.token_type", int, required=False) or [NORMAL] * len(tokens)
        if len(types) != len(tokens):
            md.fail(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
        pre = None if self.spm else self._pre_tokenizer(md, metadata)
        self.types = [CONTROL if t in EOG_TEXTS else k for t, k in zip(tokens, types)]
        self.tokens = tokens
        n = len(tokens)
        default_bos, default_eos = (1, 2) if self.spm else (11, 11)        # llama.cpp's defaults
        self.bos_id = md.token_id("tokenizer.ggml.bos_token_id", n, default_bos if n > default_bos else None)
        self.eos_id = md.token_id("tokenizer.ggml.eos_token_id", n, default_eos if n > default_eos else None)
        self.add_bos = md.flag("tokenizer.ggml.add_bos_token", self.spm or pre.add_bos)
        self.add_eos = md.flag("tokenizer.ggml.add_eos_token", False)
        self.add_space_prefix = self.spm and md.flag("tokenizer.ggml.add_space_prefix", True)
        for flag, tid, name in ((self.add_bos, self.bos_id, "bos"), (self.add_eos, self.eos_id, "eos")):
            if flag and tid is None:
                md.fail(f"tokenizer.ggml.add_{name}_token is true, but tokenizer.ggml.{name}_token_id is not set")
        ends = [self.eos_id] + [md.token_id(f"tokenizer.ggml.{k}_token_id", n, None) for k in ("eot", "eom")]
        self.eog_ids = frozenset([i for i, t in enumerate(tokens) if t in EOG_TEXTS] + [i for i in ends if i is not None])
        template = metadata.get("tokenizer.chat_template")
        self.chat_template = template if isinstance(template, str) else None
        self._bytes = _byte_values(md, tokens, self.types) if self.spm else {}
        self._rstrip = _rstrip_patterns(metadata, tokens, self.types)
        self._specials = sorted(((t, i, k != USER_DEFINED) for i, (t, k) in enumerate(zip(tokens, self.types))
                                 if k in (CONTROL, UNKNOWN, USER_DEFINED)), key=lambda s: -len(s[0].encode()))
        self._special_ids = frozenset(i for _, i, _ in self._specials)
        if self.spm:
            scores = md.list_of("tokenizer.ggml.scores", (float, int), required=False) or [0.0] * n
            if len(scores) != n or any(x != x for x in scores):
                md.fail(f"tokenizer.ggml.scores has {len(scores)} entries for {n} tokens, or a NaN")
            unk = md.token_id("tokenizer.ggml.unknown_token_id", n, 0 if n else None)
        else:
            merges = md.list_of("tokenizer.ggml.merges", str)
        try:
            hf = _build_spm(tokens, scores, self.add_space_prefix, None if unk is None else tokens[unk]) if self.spm \
                else _build_hf(tokens, merges, pre)
            self._hf = _added(hf, tokens, self.types)
        except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception types on bad vocabularies
            md.fail(f"its tokenizer could not be built ({type(e).__name__}: {e})")

    @staticmethod
    def _pre_tokenizer(md: _Metadata, metadata: dict) -> PreTokenizer:
        pre_name = metadata.get("tokenizer.ggml.pre", "default")
        if not isinstance(pre_name, str) or pre_name not in PRE_TOKENIZERS:
            md.fail(f"pre-tokenizer tokenizer.ggml.pre={pre_name!r} is not supported (known: "
                    f"{', '.join(sorted(PRE_TOKENIZERS))})")
        return PRE_TOKENIZERS[pre_name]

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list:
        """Token ids of `text` (llama_tokenize): BOS/EOS added when `add_special` and the file says so; special
        tokens' texts become those tokens when `parse_special` (user-defined tokens always do)."""
        if self._rstrip[parse_special] is not None:
            text = self._rstrip[parse_special].sub(r"\1", text)
        self._hf.encode_special_tokens = not parse_special
        ids = self._hf.encode(text, add_special_tokens=False).ids       # leftmost-longest: where no token overlaps,
        if any(i in self._special_ids for i in ids):                     # llama.cpp's cut too
            self._hf.encode_special_tokens = True       # what _partition leaves holds no special token's text
            ids = []
            for part in self._partition(text, parse_special):
                ids += [part] if isinstance(part, int) else self._hf.encode(part, add_special_tokens=False).ids
        if add_special and self.add_bos:
            ids = [self.bos_id] + ids
        if add_special and self.add_eos:
            ids = ids + [self.eos_id]
        return ids

    def _partition(self, text: str, parse_special: bool) -> list:
        """text as raw pieces (str) and special tokens (ids), as llama.cpp's tokenizer_st_partition cuts it: the
        special tokens longest first (in bytes; equal lengths in id order), each cut out of every raw piece wherever
        it occurs, leftmost first; user-defined tokens always, control and unknown ones when `parse_special`. (Where
        two overlap, "   x" with tokens "   " and "  x", the one taken first wins, not the leftmost.)"""
        parts = [text]
        for t, tid, control in self._specials:
            if (control and not parse_special) or t not in text:
                continue
            cut = []
            for part in parts:
                if not isinstance(part, str):
                    cut.append(part)
                    continue
                start = 0
                while (k := part.find(t, start)) >= 0:
                    cut += [part[start:k], tid] if k > start else [tid]
                    start = k + len(t)
                if start < len(part):
                    cut.append(part[start:])
            parts = cut
        return parts

    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        """The bytes a token stands for (llama_token_to_piece): normal tokens byte-level decoded (BPE) or with
        U+2581 as space (SentencePiece), byte tokens their byte, the text of user-defined tokens, of control ones
        only when `special`, nothing for unused ones."""
        text, kind = self.tokens[token_id], self.types[token_id]
        if kind == NORMAL and self.spm:
            return text.replace(SPACE, " ").encode()
        if kind == BYTE and self.spm:
            return self._bytes[token_id]
        if kind in (NORMAL, BYTE):
            return b"".join(bytes([_BYTE_OF_CHAR[c]]) if c in _BYTE_OF_CHAR else c.encode() for c in text)
        if kind == USER_DEFINED or (special and kind in (CONTROL, UNKNOWN)):
            return text.encode()
        return b""

    def decode(self, ids, special: bool = False) -> str:
        """The text of `ids` (llama_detokenize; bytes that are no valid UTF-8 become U+FFFD). With
        add_space_prefix, the first token's text loses one leading space (the one encode put there)."""
        pieces = [self.token_bytes(i, special) for i in ids]
        if self.add_space_prefix and pieces and pieces[0].startswith(b" "):
            pieces[0] = pieces[0][1:]
        return b"".join(pieces).decode("utf-8", errors="replace")

    def stream(self) -> TextStream:
        """A decoder for tokens that arrive one at a time."""
        return TextStream(self)


class TextStream:
    """Text of tokens as they come: a character split across tokens is held back until its last byte arrives."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text completed by this token (possibly empty)."""
        return self._utf8.decode(self.tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """What is held back at the end (an incomplete character, as U+FFFD)."""
        return self._utf8.decode(b"", final=True)
