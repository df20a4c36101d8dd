"""rope_ext against transformers' Llama rotary embedding (an independent implementation: NEOX pairing; normal pairing
through the permutation that turns one into the other) for default, linear, YaRN and llama3 frequencies (llama3 as
ggml runs it: frequency factors); and rope in place of its source."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import ggpy
from ggpy.test_backend_ops.references import REFERENCES

torch = pytest.importorskip("torch")


def _import_llama():
    """transformers' Llama modules, imported with the MobileSAM tests' torchvision stand-in (tests/models/conftest.py) hidden."""
    stubs = {k: m for k, m in sys.modules.items() if k.split(".")[0] == "torchvision" and getattr(m, "__file__", None) is None}
    for k in stubs:
        del sys.modules[k]
    try:
        return pytest.importorskip("transformers.models.llama.modeling_llama")
    finally:
        sys.modules.update(stubs)


llama = _import_llama()

HD = 64
SCALINGS = {  # transformers' rope_parameters -> rope_ext's (freq_base, freq_scale, ext_factor, n_ctx_orig)
    "default": ({"rope_type": "default", "rope_theta": 1e4}, (1e4, 1.0, 0.0, 0)),
    "linear": ({"rope_type": "linear", "rope_theta": 5e5, "factor": 4.0}, (5e5, 0.25, 0.0, 0)),
    "yarn": ({"rope_type": "yarn", "rope_theta": 1e5, "factor": 4.0, "original_max_position_embeddings": 4096},
             (1e5, 0.25, 1.0, 4096)),
    "llama3": ({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, (5e5, 1.0, 0.0, 0)),
}


def _embedding(params):
    return llama.LlamaRotaryEmbedding(llama.LlamaConfig(hidden_size=4 * HD, num_attention_heads=4, head_dim=HD,
                                            max_position_embeddings=16384, rope_parameters=params))


def _transformers(x, pos, params):
    """x (n_tokens, n_head, HD) rotated by transformers: its frequencies and magnitude, cos/sin in float64."""
    emb = _embedding(params)
    freqs = torch.tensor(pos, dtype=torch.float64)[:, None] * emb.inv_freq.double()[None]
    angles = torch.cat([freqs, freqs], dim=-1)[None]
    q = torch.tensor(x).permute(1, 0, 2)[None]
    out, _ = llama.apply_rotary_pos_emb(q, q, angles.cos() * emb.attention_scaling, angles.sin() * emb.attention_scaling)
    return out[0].permute(1, 0, 2).numpy()


def _ggpy(x, pos, mode, base, scale, ext, n_ctx, factors=None, backend=None):
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, tuple(reversed(x.shape))).set_input()
    b = ctx.new_tensor(ggpy.I32, (len(pos),)).set_input()
    c = ctx.new_tensor(ggpy.F32, (len(factors),)).set_input() if factors is not None else None
    out = ggpy.rope_ext(a, b, c, HD, mode, n_ctx, base, scale, ext, 1.0, 32.0, 1.0)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = backend or ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(x)
    b.set(np.asarray(pos, np.int32))
    if c is not None:
        c.set(factors)
    backend.compute(graph)
    return out.numpy()


@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("mode", [0, 2])
def test_rope_matches_transformers(scaling, mode):
    params, (base, scale, ext, n_ctx) = SCALINGS[scaling]
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, (11, 3, HD)).astype(np.float32)
    pos = rng.integers(0, 2000, 11)
    factors = None
    if scaling == "llama3":         # ggml runs llama3's frequencies as factors dividing the default ones
        inv = _embedding(params).inv_freq.double().numpy()
        factors = (base ** (-np.arange(0, HD, 2) / HD) / inv).astype(np.float32)
    got = _ggpy(x, pos, mode, base, scale, ext, n_ctx, factors)
    if mode == 2:
        want = _transformers(x.astype(np.float64), pos, params)
    else:   # normal pairs (2i, 2i+1) are NEOX pairs (i, i + HD/2) of the values with the even ones first
        order = np.r_[0:HD:2, 1:HD:2]
        want = np.empty_like(x, dtype=np.float64)
        want[..., order] = _transformers(x[..., order].astype(np.float64), pos, params)
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert not np.allclose(got, x, atol=1e-2)


def test_rope_runs_in_place_of_its_source():
    """rope(x + y): the planner puts rope in the add's memory, and the kernel reads each pair before writing it."""
    rng = np.random.default_rng()
    ctx = ggpy.Context()
    x, y = (ctx.new_tensor(ggpy.F32, (HD, 5, 9)).set_input() for _ in range(2))
    pos = ctx.new_tensor(ggpy.I32, (9,)).set_input()
    s = ggpy.add(x, y)
    out = ggpy.rope_ext(s, pos, None, 48, 0, 4096, 1e5, 0.25, 1.0, 1.0, 32.0, 1.0)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert out.buffer is s.buffer and out.offset == s.offset
    xv, yv = (rng.uniform(-1, 1, (9, 5, HD)) for _ in range(2))
    pv = rng.integers(0, 5000, 9).astype(np.int32)
    x.set(xv)
    y.set(yv)
    pos.set(pv)
    backend.compute(graph)
    want = REFERENCES["rope"](out, [(xv + yv)[None].astype(np.float32).astype(np.float64), pv])[0]
    np.testing.assert_allclose(out.numpy(), want, atol=1e-5)
