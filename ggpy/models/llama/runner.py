"""The model generate.py drives, computed by the ggpy graph of model.py on a backend.

Weights are loaded once (ggpy.load_gguf, quantized tensors as they are); the KV cache lives in a buffer of its own;
two GraphRunners (lanes) own the compute memory, one for prompt chunks and one for single tokens, each reserved at the
start for its worst case (n_batch tokens, or one, attending over the whole context; the last token's logits: a chunk
that keeps every token's grows its lane's buffer once), so later plans never grow them.
A graph depends on the number of tokens it reads and the cache rows it attends over (rounded up to KV_PAD), not on
n_past: positions, the mask and the cache rows written are inputs, so one planned graph is replayed for up to
KV_PAD generated tokens (ggml's reserve + worst-case graph, with set_rows for the cache writes); the token lane's
graph stays planned while prompts come and go.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import ggpy
from ggpy.backends import make_backend

from .gguf_file import LlamaGGUF
from .model import CACHE_TYPES, Inputs, KVCache, flash_attention, forward, new_inputs

DEFAULT_CTX = 4096      # llama.cpp's default context, when the model's is longer
DEFAULT_BATCH = 512     # tokens per evaluation of a prompt (llama.cpp's default micro-batch)
KV_PAD = 256            # attention reads the cache rows in use rounded up to this (llama.cpp pads likewise)


@dataclass
class Step:
    """One built graph: its shape key (n_tokens, n_kv, all_logits), inputs and logits tensor."""

    key: tuple
    graph: ggpy.Graph
    inputs: Inputs
    logits: ggpy.Tensor


@dataclass
class Lane:
    """A GraphRunner with its memory reserved, and the step whose graph it planned last (None before the first)."""

    runner: ggpy.GraphRunner
    current: Step | None = None


@dataclass
class Stats:
    """Where the time of the evaluations so far went (seconds)."""

    graphs_built: int = 0
    build_s: float = 0.0        # building graphs (op constructors)
    plan_s: float = 0.0         # planning them and binding their kernels (first compute of a plan)
    compute_s: float = 0.0      # setting inputs, computing, reading logits

    def line(self, n_tokens: int) -> str:
        per = (self.build_s + self.plan_s) / max(n_tokens, 1)
        return (f"graphs: {self.graphs_built} built ({self.build_s * 1e3:.1f} ms) and planned + bound "
                f"({self.plan_s * 1e3:.1f} ms); planning per token read {per * 1e3:.3f} ms, compute "
                f"{self.compute_s / max(n_tokens, 1) * 1e3:.3f} ms")


class GraphModel:
    """A llama-family model evaluated by ggpy: `eval(tokens)` reads tokens after those already read (the KV cache)
    and returns their logits; `n_ctx` is the most tokens it holds; `reset()` forgets them.

    backend: 'cpu', 'cuda' or a ggpy Backend; n_threads: CPU workers; n_ctx: context (default the model's, at most
    DEFAULT_CTX); n_batch: the most tokens one evaluation of the graph reads (longer inputs run in chunks);
    cache_type_k / cache_type_v: the KV cache's types, "f32", "f16" (llama.cpp's default) or "q8_0" (model.CACHE_TYPES);
    flash_attn: "on", "off" or "auto" (True / False: on / off): attention as flash_attn_ext (else mul_mat,
    soft_max_ext, mul_mat), auto where the backend runs it (model.flash_attention; self.flash_attn the outcome)."""

    def __init__(self, model: LlamaGGUF, backend="cpu", n_threads: int | None = None, n_ctx: int | None = None,
                 n_batch: int = DEFAULT_BATCH, flash_attn="auto", cache_type_k: str = "f16",
                 cache_type_v: str = "f16"):
        hp = self.hp = model.hparams
        types = [CACHE_TYPES.get(str(t).lower()) for t in (cache_type_k, cache_type_v)]
        if None in types:
            raise ValueError(f"KV cache types must be one of {', '.join(CACHE_TYPES)}, got {cache_type_k!r}, "
                             f"{cache_type_v!r}")
        self.n_ctx = n_ctx or min(hp.n_ctx_train, DEFAULT_CTX)
        if self.n_ctx < 1:
            raise ValueError(f"context size {self.n_ctx} must be at least 1")
        self.n_batch = min(n_batch, self.n_ctx)
        self.backend = make_backend(backend, n_threads) if isinstance(backend, str) else backend
        self.flash_attn = flash_attention(hp, self.backend, flash_attn, *types)
        self.weights = ggpy.load_gguf(model.path, self.backend, architecture=hp.arch)
        self.cache = KVCache(hp, self.n_ctx, self.backend, *types)
        self.cache.buffer.fill(0, self.cache.buffer.size, 0)    # rows past n_past are read (masked): never NaN
        self.stats = Stats()
        self._lanes = {}          # single token or not -> Lane
        for n_tokens in {1, self.n_batch}:
            worst = self._build((n_tokens, self.n_ctx, n_tokens == 1)).graph
            self._lanes[n_tokens == 1] = Lane(ggpy.GraphRunner(None, self.backend, reserve=worst))
        self.stats = Stats()      # the evaluations' alone, not the reserves'
        self.reset()

    def reset(self):
        """Forget every token read."""
        self.n_past = 0

    @property
    def nbytes(self) -> dict:
        """Bytes of the weights, the KV cache and the compute buffers."""
        return {"weights": self.weights.nbytes, "kv_cache": self.cache.nbytes,
                "compute": sum(b.size for lane in self._lanes.values() for b in lane.runner.allocator.buffers)}

    def _build(self, key: tuple) -> Step:
        t0 = time.perf_counter()
        n_tokens, n_kv, all_logits = key
        inputs = new_inputs(ggpy.Context(), n_tokens, n_kv)
        logits = forward(self.weights, self.hp, self.cache, inputs, all_logits, self.flash_attn)
        step = Step(key, ggpy.Graph().build_forward_expand(logits), inputs, logits)
        self.stats.graphs_built += 1
        self.stats.build_s += time.perf_counter() - t0
        return step

    def _lane(self, n_tokens: int, all_logits: bool) -> Lane:
        """The lane of `n_tokens` tokens after n_past, running its current graph while it fits (n_kv, the cache rows
        read, is n_past + n_tokens rounded up to KV_PAD), else a new one, planned in the lane's reserved memory."""
        n_kv = min(self.n_ctx, -(-(self.n_past + n_tokens) // KV_PAD) * KV_PAD)
        key = (n_tokens, n_kv, all_logits or n_tokens == 1)
        lane = self._lanes[n_tokens == 1]
        if lane.current is None or lane.current.key != key:
            step = self._build(key)
            t0 = time.perf_counter()
            lane.runner.use(step.graph)
            lane.current = step
            self.stats.plan_s += time.perf_counter() - t0
        return lane

    def _inputs(self, inp: Inputs, tokens: list) -> dict:
        """The graph's inputs (by name) for `tokens` read after n_past."""
        n = len(tokens)
        pos = np.arange(self.n_past, self.n_past + n, dtype=np.int32)
        visible = np.arange(inp.n_kv)[None, :] <= pos[:, None]
        return {"tokens": np.asarray(tokens, dtype=np.int32), "pos": pos,
                "kq_mask": np.where(visible, 0.0, -np.inf).astype(np.float32).reshape(1, 1, n, inp.n_kv)}

    def _eval_chunk(self, tokens: list, all_logits: bool) -> np.ndarray:
        lane = self._lane(len(tokens), all_logits)
        step, run = lane.current, lane.runner
        t0 = time.perf_counter()
        logits = run.set(**self._inputs(step.inputs, tokens)).compute().get(step.logits).reshape(-1, self.hp.n_vocab)
        self.stats.compute_s += time.perf_counter() - t0
        self.n_past += len(tokens)
        return logits

    def eval(self, tokens, all_logits: bool = True) -> np.ndarray:
        """Logits float32 (len(tokens), n_vocab) of `tokens` read after the cached ones, row i the prediction after
        token i; without all_logits only the last row's (1, n_vocab)."""
        tokens = [int(t) for t in tokens]
        if not tokens or self.n_past + len(tokens) > self.n_ctx:
            raise ValueError(f"cannot read {len(tokens)} tokens after {self.n_past} (context {self.n_ctx})")
        if min(tokens) < 0 or max(tokens) >= self.hp.n_vocab:
            raise ValueError(f"token ids must lie in [0, {self.hp.n_vocab}), got {min(tokens)}..{max(tokens)}")
        chunks = [tokens[i:i + self.n_batch] for i in range(0, len(tokens), self.n_batch)]
        logits = [self._eval_chunk(chunk, all_logits) for chunk in chunks]
        return np.concatenate(logits) if all_logits and len(logits) > 1 else logits[-1]
