"""The model generate.py drives, computed by the ggpy graph of model.py on a backend.

Weights are loaded once (ggpy.load_gguf, quantized tensors as they are); the KV cache lives in a buffer of its own;
one GraphAllocator owns the compute memory, reserved at the start for the worst case (a chunk of n_batch tokens
attending over the whole context), so later plans never grow it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import ggpy
from ggpy.backends import make_backend

from .gguf_file import LlamaGGUF
from .model import Inputs, KVCache, build_graph, new_inputs

DEFAULT_CTX = 4096      # llama.cpp's default context, when the model's is longer
DEFAULT_BATCH = 512     # tokens per evaluation of a prompt (llama.cpp's default micro-batch)


@dataclass
class Step:
    """One built graph: its inputs and logits tensor."""

    graph: ggpy.Graph
    inputs: Inputs
    logits: ggpy.Tensor


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
    DEFAULT_CTX); n_batch: the most tokens one evaluation of the graph reads (longer inputs run in chunks)."""

    def __init__(self, model: LlamaGGUF, backend="cpu", n_threads: int | None = None, n_ctx: int | None = None,
                 n_batch: int = DEFAULT_BATCH):
        hp = self.hp = model.hparams
        self.n_ctx = n_ctx or min(hp.n_ctx_train, DEFAULT_CTX)
        if not 1 <= self.n_ctx:
            raise ValueError(f"context size {self.n_ctx} must be at least 1")
        self.n_batch = min(n_batch, self.n_ctx)
        self.backend = make_backend(backend, n_threads) if isinstance(backend, str) else backend
        self.weights = ggpy.load_gguf(model.path, self.backend, architecture=hp.arch)
        self.cache = KVCache(hp, self.n_ctx, self.backend)
        self.cache.buffer.fill(0, self.cache.buffer.size, 0)    # rows past n_past are read (masked): never NaN
        self.allocator = ggpy.GraphAllocator(self.backend)
        self.stats = Stats()
        self._current = None
        self.allocator.reserve(self._build(self.n_ctx - self.n_batch, self.n_batch).graph)
        self.reset()

    def reset(self):
        """Forget every token read."""
        self.n_past = 0

    @property
    def nbytes(self) -> dict:
        """Bytes of the weights, the KV cache and the compute buffers."""
        return {"weights": self.weights.nbytes, "kv_cache": self.cache.nbytes,
                "compute": sum(b.size for b in self.allocator.buffers)}

    def _build(self, n_past: int, n_tokens: int, all_logits: bool = True) -> Step:
        t0 = time.perf_counter()
        inputs = new_inputs(ggpy.Context(), n_past, n_tokens, n_past + n_tokens)
        graph, logits = build_graph(self.weights, self.hp, self.cache, inputs, all_logits)
        self.stats.graphs_built += 1
        self.stats.build_s += time.perf_counter() - t0
        return Step(graph, inputs, logits)

    def _plan(self, step: Step):
        if self._current is not step:
            t0 = time.perf_counter()
            self.allocator.alloc_graph(step.graph)
            self.backend.program(step.graph)
            self._current = step
            self.stats.plan_s += time.perf_counter() - t0

    def _set_inputs(self, inp: Inputs, tokens: list):
        n = len(tokens)
        inp.tokens.set(np.asarray(tokens, dtype=np.int32))
        pos = np.arange(self.n_past, self.n_past + n, dtype=np.int32)
        inp.pos.set(pos)
        visible = np.arange(inp.n_kv)[None, :] <= pos[:, None]
        inp.mask.set(np.where(visible, 0.0, -np.inf).astype(np.float32).reshape(1, 1, n, inp.n_kv))

    def _eval_chunk(self, tokens: list, all_logits: bool) -> np.ndarray:
        step = self._build(self.n_past, len(tokens), all_logits)
        self._plan(step)
        t0 = time.perf_counter()
        self._set_inputs(step.inputs, tokens)
        self.backend.compute(step.graph)
        logits = step.logits.numpy().reshape(-1, self.hp.n_vocab)
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
        return np.concatenate(logits) if all_logits else logits[-1]
