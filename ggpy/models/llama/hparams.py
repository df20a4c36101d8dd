"""The hyper-parameters of a llama-family model, read from GGUF metadata (keys `{arch}.*`, as llama.cpp names them).

The keys every architecture has are read here; an architecture's own (soft-capping, sliding windows, multipliers)
by its description's `read` (arch.py). A missing key, a value of the wrong kind or out of range, or an architecture
outside arch.ARCHITECTURES is refused with ggpy.ModelFileError naming it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ggpy import ModelFileError

from .arch import ARCHITECTURES

ROPE_SCALINGS = ("none", "linear", "yarn")


@dataclass(frozen=True)
class HParams:
    """Sizes (ne order in ggpy: a head's dims innermost) and rope/norm constants of one model."""

    arch: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int          # query/key length per head
    head_dim_v: int        # value length per head
    n_rot: int             # leading dims of each head that rope rotates
    rms_eps: float
    rope_type: str
    rope_base: float
    rope_freq_scale: float     # 1 / rope.scaling.factor (1 without scaling)
    rope_ext_factor: float     # YaRN's extrapolation mix: 1 with yarn scaling, else 0
    rope_attn_factor: float
    n_ctx_orig: int            # rope.scaling.original_context_length, else the training context
    qkv_bias: bool
    rope_beta_fast: float      # YaRN's ramp ends (llama.cpp's defaults 32 and 1)
    rope_beta_slow: float
    # the architectures' own (arch.py reads them; these defaults change nothing)
    kq_scale: float = 0.0          # attention scores' scale (0: 1 / sqrt(head_dim))
    attn_softcap: float = 0.0      # scores s -> c * tanh(s / c) before the softmax (0: none)
    final_softcap: float = 0.0     # the logits likewise
    embd_scale: float = 1.0        # the token embeddings' multiplier
    residual_scale: float = 1.0    # each sublayer's output multiplier before the residual add
    logit_scale: float = 1.0       # the logits' divisor
    n_swa: int = 0                 # sliding window: a token sees the n_swa positions up to its own (0: none)
    swa_layers: tuple = ()         # per block: whether it slides (only with n_swa)
    rope_base_swa: float = 10000.0     # the sliding blocks' rope base (their frequency scale is 1)
    n_expert: int = 0              # mixture of experts: experts per block and those used per token
    n_expert_used: int = 0
    n_ff_exp: int = 0              # an expert's feed-forward width (0: n_ff)
    expert_weights_scale: float = 0.0  # the chosen experts' weights' multiplier (0: none)

    def is_swa(self, il: int) -> bool:
        """Whether block `il` attends through the sliding window."""
        return self.n_swa > 0 and self.swa_layers[il]

    @property
    def spec(self):
        """The architecture's description (arch.Arch)."""
        return ARCHITECTURES[self.arch]

    @property
    def n_gqa(self) -> int:
        """Query heads per KV head."""
        return self.n_head // self.n_head_kv


class Keys:
    """Typed look-ups in the metadata of the file at `path`, each failure naming the key."""

    def __init__(self, metadata: dict, path: str):
        self.md, self.path = metadata, path

    def _get(self, key, default):
        if key in self.md:
            return self.md[key]
        if default is None:
            raise ModelFileError(f"{self.path} has no metadata key '{key}' (needed for a "
                                 f"{self.md.get('general.architecture')} model)")
        return default

    def integer(self, key: str, default=None, minimum: int = 1) -> int:
        v = self._get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ModelFileError(f"{self.path}: metadata '{key}' = {v!r}; expected an integer >= {minimum}")
        return v

    def number(self, key: str, default=None) -> float:
        v = self._get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ModelFileError(f"{self.path}: metadata '{key}' = {v!r}; expected a finite number > 0")
        return float(v)

    def string(self, key: str, default=None) -> str:
        v = self._get(key, default)
        if not isinstance(v, str):
            raise ModelFileError(f"{self.path}: metadata '{key}' = {v!r}; expected a string")
        return v


def _n_vocab(keys: Keys, arch: str) -> int:
    tokens = keys.md.get("tokenizer.ggml.tokens")
    if f"{arch}.vocab_size" not in keys.md and isinstance(tokens, list):
        return len(tokens)
    return keys.integer(f"{arch}.vocab_size")


def hparams_from_metadata(metadata: dict, path: str = "model") -> HParams:
    """The HParams of a GGUF's metadata (key -> value, as gguf.GGUFReader's fields give them)."""
    k = Keys(metadata, path)
    arch = k.string("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelFileError(f"{path} has general.architecture={arch!r}; ggpy's llama runner reads "
                             f"{', '.join(ARCHITECTURES)}")
    spec = ARCHITECTURES[arch]
    n_expert = k.integer(f"{arch}.expert_count", 0, minimum=0)
    if n_expert and not spec.experts:
        raise ModelFileError(f"{path} is a mixture-of-experts model ({arch}.expert_count={n_expert}); ggpy's "
                             f"llama runner reads {arch} as a dense model")
    n_embd, n_head = k.integer(f"{arch}.embedding_length"), k.integer(f"{arch}.attention.head_count")
    n_head_kv = k.integer(f"{arch}.attention.head_count_kv", n_head)
    if n_head % n_head_kv:
        raise ModelFileError(f"{path}: {n_head} query heads do not split into {n_head_kv} KV head groups")
    head_dim = k.integer(f"{arch}.attention.key_length", n_embd // n_head)
    n_rot = k.integer(f"{arch}.rope.dimension_count", head_dim)
    if n_rot % 2 or n_rot > head_dim:
        raise ModelFileError(f"{path}: {arch}.rope.dimension_count={n_rot}; expected an even number <= the head "
                             f"dimension {head_dim}")
    scaling = k.string(f"{arch}.rope.scaling.type", "none")
    if scaling not in ROPE_SCALINGS:
        raise ModelFileError(f"{path}: rope scaling {scaling!r} is not supported (expected one of {ROPE_SCALINGS})")
    factor = metadata.get(f"{arch}.rope.scaling.factor", 0.0)
    n_ctx_train = k.integer(f"{arch}.context_length")
    hp = HParams(
        arch=arch, n_vocab=_n_vocab(k, arch), n_ctx_train=n_ctx_train, n_embd=n_embd,
        n_layer=k.integer(f"{arch}.block_count"), n_ff=k.integer(f"{arch}.feed_forward_length"),
        n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        head_dim_v=k.integer(f"{arch}.attention.value_length", head_dim), n_rot=n_rot,
        rms_eps=k.number(f"{arch}.attention.layer_norm_rms_epsilon"),
        rope_type=spec.rope_type, rope_base=k.number(f"{arch}.rope.freq_base", 10000.0),
        rope_freq_scale=1.0 / k.number(f"{arch}.rope.scaling.factor") if factor else 1.0,
        rope_ext_factor=k.number(f"{arch}.rope.scaling.yarn_ext_factor", 1.0) if scaling == "yarn" else 0.0,
        rope_attn_factor=k.number(f"{arch}.rope.scaling.attn_factor", 1.0),
        n_ctx_orig=k.integer(f"{arch}.rope.scaling.original_context_length", n_ctx_train),
        qkv_bias=spec.qkv_bias,
        rope_beta_fast=k.number(f"{arch}.rope.scaling.yarn_beta_fast", 32.0),
        rope_beta_slow=k.number(f"{arch}.rope.scaling.yarn_beta_slow", 1.0),
        n_expert=n_expert, n_expert_used=k.integer(f"{arch}.expert_used_count", 0, minimum=0),
    )
    return replace(hp, **spec.read(k, hp))
