"""The architectures ggpy's llama runner reads, each a small description, as llama.cpp's converter
(convert_hf_to_gguf.py) writes them: `general.architecture` -> Arch.

An Arch says which pieces of layers.py its blocks use (rope pairing, biases, fused tensors, q/k norms, where the
norms sit, the FFN and its activation) and reads its own hyper-parameters from the GGUF metadata (`read`: keys ->
HParams fields: soft-caps, sliding windows, multipliers). The graph (model.forward, layers.block) and the tensor
check (block_tensors) follow from it. Adding an architecture is an entry here of a few lines plus, where it needs
one, a metadata reader or a layers.py piece; e.g. OLMo 2 (norms after the sublayers, q/k norms over the whole
projection) is `Arch("neox", norms="post", qk_norm="full")`. A mixture-of-experts FFN is an FFN whose `build`
routes each token to its experts and whose `tensors` name the experts' (set `experts=True` on the Arch).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Callable

from ggpy import ModelFileError

from . import arch_moe, layers


@dataclass(frozen=True)
class FFN:
    """A block's feed-forward: build(m, hp, il, h) -> ne (n_embd, n_tokens), and tensors(hp) -> {name: ne} of the
    block's tensors it reads (names after `blk.{il}.`)."""

    build: Callable
    tensors: Callable


def _mlp_tensors(hp) -> dict:
    d, f = hp.n_embd, hp.n_ff
    if hp.spec.fused:
        return {"ffn_up.weight": (d, 2 * f), "ffn_down.weight": (f, d)}
    return {"ffn_gate.weight": (d, f), "ffn_up.weight": (d, f), "ffn_down.weight": (f, d)}


GATED_MLP = FFN(layers.gated_mlp, _mlp_tensors)


def _nothing(keys, hp) -> dict:
    return {}


@dataclass(frozen=True)
class Arch:
    """One architecture. rope_type: "norm" pairs (2i, 2i+1) of each head, "neox" (i, i + n_rot/2); qkv_bias: biases
    on q, k, v; fused: one attn_qkv tensor and ffn_up holding [gate; up]; qk_norm: "" none, "head" RMSNorm of each
    head (weights ne (head_dim,)), "full" of the whole q / k projection; norms: "pre" before each sublayer, "post"
    after it (before the residual add), "both"; act: the gate's activation ("silu", "gelu"); ffn: the feed-forward
    (experts: a mixture of experts, expert_count allowed); swa_rope: sliding blocks rope with rope_base_swa and no
    scaling; read(keys, hp) -> {HParams field: value} of the architecture's own metadata."""

    rope_type: str = "norm"
    qkv_bias: bool = False
    fused: bool = False
    qk_norm: str = ""
    norms: str = "pre"
    act: str = "silu"
    ffn: FFN = GATED_MLP
    experts: bool = False
    swa_rope: bool = False
    read: Callable = field(default=_nothing)


def swa_pattern(keys, hp, default: int) -> tuple:
    """Which blocks slide, as llama.cpp's load_swa_pattern: `{arch}.attention.sliding_window_pattern` as a bool per
    block, or an integer n (block il slides iff il % n < n - 1; 0: all do), else `default` as that n."""
    v = keys.md.get(f"{hp.arch}.attention.sliding_window_pattern", default)
    if isinstance(v, list):
        if len(v) != hp.n_layer:
            raise ModelFileError(f"{keys.path}: {hp.arch}.attention.sliding_window_pattern has {len(v)} entries for "
                                 f"{hp.n_layer} blocks")
        return tuple(bool(b) for b in v)
    n = keys.integer(f"{hp.arch}.attention.sliding_window_pattern", default, minimum=0)
    return tuple(n == 0 or il % n < n - 1 for il in range(hp.n_layer))


def _swa(keys, hp, default_pattern: int, default_window: int | None = None) -> dict:
    """The sliding window (n_swa; 0 or absent: none) and its block pattern."""
    n_swa = keys.integer(f"{hp.arch}.attention.sliding_window", default_window or 0, minimum=0)
    if not n_swa:
        return {}
    return {"n_swa": n_swa, "swa_layers": swa_pattern(keys, hp, default_pattern),
            "rope_base_swa": keys.number(f"{hp.arch}.rope.freq_base_swa", hp.rope_base)}


def _llama(keys, hp) -> dict:
    return _swa(keys, hp, 0)        # Mistral's sliding window: every block, when the file names one


def _granite(keys, hp) -> dict:
    a = hp.arch
    return {"embd_scale": keys.number(f"{a}.embedding_scale", 1.0),
            "residual_scale": keys.number(f"{a}.residual_scale", 1.0),
            "kq_scale": keys.number(f"{a}.attention.scale", 1.0 / math.sqrt(hp.head_dim)),
            "logit_scale": keys.number(f"{a}.logit_scale")}


def _gemma(keys, hp, pattern: int, window: int | None) -> dict:
    caps = {f: keys.number(f"{hp.arch}.{k}", 0.0) if f"{hp.arch}.{k}" in keys.md else 0.0
            for f, k in (("attn_softcap", "attn_logit_softcapping"), ("final_softcap", "final_logit_softcapping"))}
    return {"embd_scale": math.sqrt(hp.n_embd), **caps, **_swa(keys, hp, pattern, window)}


def _gemma3(keys, hp) -> dict:
    out = _gemma(keys, hp, 6, None)
    if out.get("n_swa"):        # llama.cpp's local base when the file names none
        out["rope_base_swa"] = keys.number(f"{hp.arch}.rope.freq_base_swa", 10000.0)
    return out


ARCHITECTURES = {
    "llama": Arch("norm", experts=True, ffn=FFN(*arch_moe.or_dense(layers.gated_mlp, _mlp_tensors)),
                  read=lambda k, hp: {**_llama(k, hp), **arch_moe.read_experts(k, hp)}),   # with experts: Mixtral
    "qwen3moe": Arch("neox", qk_norm="head", experts=True, ffn=FFN(arch_moe.moe_ffn, arch_moe.moe_tensors),
                     read=arch_moe.read_experts),
    "qwen2": Arch("neox", qkv_bias=True),
    "qwen3": Arch("neox", qk_norm="head"),
    "olmo2": Arch("neox", qk_norm="full", norms="post", swa_rope=True, read=lambda k, hp: _swa(k, hp, 4)),
    "granite": Arch("norm", read=_granite),
    "gemma2": Arch("neox", norms="both", act="gelu", read=lambda k, hp: _gemma(k, hp, 2, 4096)),
    "gemma3": Arch("neox", norms="both", act="gelu", qk_norm="head", swa_rope=True, read=_gemma3),
    "phi3": Arch("neox", fused=True),
}


def block_tensors(hp) -> dict:
    """Block il's tensor names (after `blk.{il}.`) -> (ne, required) for the architecture of hp, in the order
    llama.cpp lists them."""
    spec, d, hd = hp.spec, hp.n_embd, hp.head_dim
    q, kv, v = hp.n_head * hd, hp.n_head_kv * hd, hp.n_head_kv * hp.head_dim_v
    pre, post = spec.norms in ("pre", "both"), spec.norms in ("post", "both")
    out = {"attn_norm.weight": ((d,), True)} if pre else {}
    if spec.fused:
        out["attn_qkv.weight"] = ((d, q + kv + v), True)
    else:
        out.update({f"attn_{n}.weight": ((d, r), True) for n, r in (("q", q), ("k", kv), ("v", v))})
        out.update({f"attn_{n}.bias": ((r,), spec.qkv_bias) for n, r in (("q", q), ("k", kv), ("v", v))})
    if spec.qk_norm:
        full = spec.qk_norm == "full"
        out.update({"attn_q_norm.weight": ((q if full else hd,), True),
                    "attn_k_norm.weight": ((kv if full else hd,), True)})
    out["attn_output.weight"] = ((hp.n_head * hp.head_dim_v, d), True)
    if post:
        out["post_attention_norm.weight"] = ((d,), True)
    if pre:
        out["ffn_norm.weight"] = ((d,), True)
    out.update({name: (ne, True) for name, ne in spec.ffn.tensors(hp).items()})
    if post:
        out["post_ffw_norm.weight"] = ((d,), True)
    return out


def expected_tensors(hp) -> dict:
    """Every tensor name of the model -> (ne, required). `output` may be absent (tied to token_embd); rope factors
    (rope_freqs, or Phi-3's LongRoPE rope_factors_long / _short) are optional."""
    d, half = hp.n_embd, hp.n_rot // 2
    shapes = {"token_embd.weight": ((d, hp.n_vocab), True), "output_norm.weight": ((d,), True),
              "output.weight": ((d, hp.n_vocab), False)}
    shapes.update({f"{n}.weight": ((half,), False) for n in ("rope_freqs", "rope_factors_long", "rope_factors_short")})
    per_block = block_tensors(hp)
    for i in range(hp.n_layer):
        shapes.update({f"blk.{i}.{name}": v for name, v in per_block.items()})
    return shapes
