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

import math
import time
from dataclasses import dataclass, field

import numpy as np

import ggpy
from ggpy.backends import make_backend

from .generate import NonFiniteLogitsError, finite
from .gguf_file import LlamaGGUF
from .model import Inputs, KVCache, cache_types, flash_attention, forward, mask_ramp, mask_rows, new_inputs

DEFAULT_CTX = 4096      # llama.cpp's default context, when the model's is longer
DEFAULT_BATCH = 512     # tokens per evaluation of a prompt (llama.cpp's default micro-batch)
KEEP = 24               # planned graphs a lane keeps: prompt chunks and tokens at that many context sizes
KV_PAD = 256            # attention reads the cache rows in use rounded up to this (llama.cpp pads likewise)
NEG_INF = float("-inf")


@dataclass
class Step:
    """One built graph: its key (n_tokens, n_kv, all_logits, head), inputs, logits tensor and, with a sampling head,
    the tensors the host reads instead of the logits: `picks` (I32 token ids: the argmax, or the top k in
    descending order) and `values` (F32, their logits)."""

    key: tuple
    graph: ggpy.Graph
    inputs: Inputs
    logits: ggpy.Tensor
    picks: ggpy.Tensor | None = None
    values: ggpy.Tensor | None = None


@dataclass
class Lane:
    """A GraphRunner with its memory reserved, the step it runs now (None before the first) and the steps it has
    built, by key: the runner keeps their plans (GraphRunner's keep), so a key met again is neither built nor planned."""

    runner: ggpy.GraphRunner
    current: Step | None = None
    steps: dict = field(default_factory=dict)
    token: TokenStep | None = None      # the token step's pinned inputs and outputs (TokenStep.of), when staged


class TokenStep:
    """A single-token step's staged inputs and sampling outputs as flat pinned arrays (GraphRunner.staged), for the
    token loop to write and read with no check, allocation or look-up: valid for n_past in [lo, hi) (the cache rows
    its graph attends over) while the lane runs it. `mask` and `swa`: the causal and the sliding mask rows (n_kv,)
    (None where the graph has no such mask; n_swa: the window); `mask_n`: the n_past they hold (-1: none yet). The
    rows of n_past + 1 differ from them in one element (causal) and two (sliding: row n_past + 1 enters the window,
    row n_past + 1 - n_swa leaves it)."""

    __slots__ = ("step", "runner", "lo", "hi", "head", "greedy", "tok", "pos", "mask", "swa", "n_swa", "picks",
                 "values", "mask_n", "t0", "t1", "sampler")

    @classmethod
    def of(cls, runner, step: Step, lo: int, n_swa: int) -> TokenStep | None:
        """The token step of `step` (None unless one token, a sampling head and every input staged)."""
        inp = step.inputs
        tensors = (inp.tokens, inp.pos, step.picks, step.values, inp.mask, inp.mask_swa)
        n_inputs = 2 + (inp.mask is not None) + (inp.mask_swa is not None)
        if inp.n_tokens != 1 or step.picks is None or len(runner.inputs) != n_inputs:     # another input: no step
            return None
        views = [None if t is None else runner.staged(t) for t in tensors]
        if any(v is None for v, t in zip(views, tensors) if t is not None):
            return None
        self = cls()
        self.step, self.runner, self.lo, self.hi, self.head = step, runner, lo, inp.n_kv, step.key[3]
        self.greedy = self.head[0] == "argmax"
        self.tok, self.pos, self.picks, self.values, self.mask, self.swa = (
            None if v is None else v.reshape(-1) for v in views)
        self.n_swa, self.mask_n, self.t0, self.t1, self.sampler = n_swa, -1, 0.0, 0.0, None
        return self


@dataclass
class Stats:
    """Where the time of the evaluations so far went (seconds)."""

    graphs_built: int = 0
    build_s: float = 0.0        # building graphs (op constructors)
    plan_s: float = 0.0         # planning them and binding their kernels (first compute of a plan)
    compute_s: float = 0.0      # setting inputs, computing, reading logits
    tokens: int = 0             # single-token evaluations (generation)
    token_host_s: float = 0.0   # their host time: everything but waiting for the device (a queuing backend's)

    def line(self, n_tokens: int) -> str:
        per = (self.build_s + self.plan_s) / max(n_tokens, 1)
        host = (f"; host time per generated token {self.token_host_s / self.tokens * 1e6:.0f} us"
                if self.tokens else "")
        return (f"graphs: {self.graphs_built} built ({self.build_s * 1e3:.1f} ms) and planned + bound "
                f"({self.plan_s * 1e3:.1f} ms); planning per token read {per * 1e3:.3f} ms, compute "
                f"{self.compute_s / max(n_tokens, 1) * 1e3:.3f} ms{host}")


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
        types = cache_types(cache_type_k, cache_type_v)
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
        self._heads = {}          # sampling head -> whether the backend runs it
        self._ramp = mask_ramp(self.n_ctx)                                      # the masks' (model.mask_rows)
        self._ramp_swa = mask_ramp(self.n_ctx, hp.n_swa) if hp.n_swa else None
        for n_tokens in {1, self.n_batch}:
            worst = self._build((n_tokens, self.n_ctx, n_tokens == 1, ())).graph
            self._lanes[n_tokens == 1] = Lane(ggpy.GraphRunner(None, self.backend, reserve=worst, keep=KEEP))
        self._token_lane = self._lanes[True]
        self.stats = Stats()      # the evaluations' alone, not the reserves'
        self._pending = None      # submit's queued choice, for result
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
        """The graph of key (n_tokens, n_kv, all_logits, head): the logits, then with head ("argmax",) or ("top_k", k)
        the sampling head (Step.picks and values) computed on the backend too."""
        t0 = time.perf_counter()
        n_tokens, n_kv, all_logits, head = key
        inputs = new_inputs(ggpy.Context(), n_tokens, n_kv, self.hp)
        logits = forward(self.weights, self.hp, self.cache, inputs, all_logits, self.flash_attn)
        step = Step(key, ggpy.Graph(), inputs, logits)
        if head:
            pick = ggpy.argmax(logits) if head[0] == "argmax" else ggpy.top_k(logits, head[1])
            step.picks = pick.set_name("picks").set_output()
            rows = ggpy.reshape_2d(logits, 1, self.hp.n_vocab)
            step.values = ggpy.get_rows(rows, step.picks).set_name("values").set_output()
            step.graph.build_forward_expand(step.picks).build_forward_expand(step.values)
        else:
            step.graph.build_forward_expand(logits)
        self.stats.graphs_built += 1
        self.stats.build_s += time.perf_counter() - t0
        return step

    def _lane(self, n_tokens: int, all_logits: bool, head: tuple = ()) -> Lane:
        """The lane of `n_tokens` tokens after n_past, running its current graph while it fits (n_kv, the cache rows
        read, is n_past + n_tokens rounded up to KV_PAD; the same sampling head), else a new one, planned in the
        lane's reserved memory."""
        n_kv = min(self.n_ctx, -(-(self.n_past + n_tokens) // KV_PAD) * KV_PAD)
        key = (n_tokens, n_kv, all_logits or n_tokens == 1, head)
        lane = self._lanes[n_tokens == 1]
        if lane.current is None or lane.current.key != key:
            step = lane.steps.pop(key, None) or self._build(key)
            lane.steps[key] = step
            while len(lane.steps) > lane.runner.keep:
                del lane.steps[next(iter(lane.steps))]
            t0 = time.perf_counter()
            lane.runner.use(step.graph)
            lane.current = step
            lane.token = TokenStep.of(lane.runner, step, (n_kv - 1) // KV_PAD * KV_PAD, self.hp.n_swa)
            self.stats.plan_s += time.perf_counter() - t0
        return lane

    def _inputs(self, inp: Inputs, tokens: list) -> dict:
        """The graph's inputs (by name) for `tokens` read after n_past: the masks are strided views of their ramps
        (model.mask_rows), nothing computed or allocated per evaluation but the copy into the input."""
        n, n_past = len(tokens), self.n_past
        out = ({"tokens": tokens, "pos": [n_past]} if n == 1 else
               {"tokens": np.asarray(tokens, dtype=np.int32), "pos": np.arange(n_past, n_past + n, dtype=np.int32)})
        if inp.mask is not None:
            out["kq_mask"] = mask_rows(self._ramp, n_past, n, inp.n_kv)
        if inp.mask_swa is not None:
            out["kq_mask_swa"] = mask_rows(self._ramp_swa, n_past, n, inp.n_kv)
        return out

    def _run(self, tokens: list, all_logits: bool, head: tuple = ()) -> Step:
        """Evaluate one chunk of `tokens` (queued where the backend queues) and return its step."""
        lane = self._lane(len(tokens), all_logits, head)
        if lane.token is not None and len(tokens) == 1:
            self._put(lane.token, tokens[0])
        else:
            lane.runner.set(**self._inputs(lane.current.inputs, tokens))
            lane.runner.compute()
        self.n_past += len(tokens)
        return lane.current

    def _put(self, ts: TokenStep, token: int):
        """Write token `token` at n_past into the token step's pinned inputs and queue its evaluation: the mask rows
        are the last ones with their elements for n_past changed when the last was n_past - 1 (else written whole)."""
        n = self.n_past
        ts.tok[0], ts.pos[0] = token, n
        if ts.mask_n != n - 1:
            self._rows(ts, n)
        else:
            if ts.mask is not None:
                ts.mask[n] = 0.0
            if ts.swa is not None:
                ts.swa[n] = 0.0
                if n >= ts.n_swa:
                    ts.swa[n - ts.n_swa] = NEG_INF
        ts.mask_n = n
        ts.runner.compute()

    def _rows(self, ts: TokenStep, n: int):
        """Write the token step's mask rows of a token at n whole."""
        if ts.mask is not None:
            ts.mask[:] = mask_rows(self._ramp, n, 1, len(ts.mask))[0, 0, 0]
        if ts.swa is not None:
            ts.swa[:] = mask_rows(self._ramp_swa, n, 1, len(ts.swa))[0, 0, 0]

    def _eval_chunk(self, tokens: list, all_logits: bool) -> np.ndarray:
        t0 = time.perf_counter()
        step = self._run(tokens, all_logits)
        logits = self._lanes[len(tokens) == 1].runner.get(step.logits).reshape(-1, self.hp.n_vocab)
        self.stats.compute_s += time.perf_counter() - t0
        return logits

    def _check(self, tokens: list):
        if not tokens or self.n_past + len(tokens) > self.n_ctx:
            raise ValueError(f"cannot read {len(tokens)} tokens after {self.n_past} (context {self.n_ctx})")
        if min(tokens) < 0 or max(tokens) >= self.hp.n_vocab:
            raise ValueError(f"token ids must lie in [0, {self.hp.n_vocab}), got {min(tokens)}..{max(tokens)}")

    def eval(self, tokens, all_logits: bool = True) -> np.ndarray:
        """Logits float32 (len(tokens), n_vocab) of `tokens` read after the cached ones, row i the prediction after
        token i; without all_logits only the last row's (1, n_vocab)."""
        tokens = [int(t) for t in tokens]
        self._check(tokens)
        chunks = [tokens[i:i + self.n_batch] for i in range(0, len(tokens), self.n_batch)]
        logits = [self._eval_chunk(chunk, all_logits) for chunk in chunks]
        return np.concatenate(logits) if all_logits and len(logits) > 1 else logits[-1]

    def next_token(self, tokens, sampler) -> int:
        """Read `tokens` after the cached ones and choose the token after them with `sampler` (sampling.Sampler),
        on the backend as far as it goes (Sampler.device_head: greedy reads the argmax, top-k the k best, so only
        ids and k logits cross to the host). NonFiniteLogitsError when the logits are not all finite."""
        self.submit(tokens, sampler)
        return self.result()

    def submit(self, tokens, sampler):
        """next_token in two halves: queue reading `tokens` and choosing the next token (`result()` waits for it and
        returns it), so that the host's work on the token before (printing it) overlaps the device's on this one.
        One token after n_past in the token step's range, with its sampling head: written into the pinned inputs and
        queued, nothing looked up or allocated (TokenStep)."""
        t0 = time.perf_counter()
        ts = self._token_lane.token
        if (ts is not None and len(tokens) == 1 and ts.lo <= self.n_past < ts.hi and sampler.device_head() == ts.head
                and 0 <= tokens[0] < self.hp.n_vocab):
            self._put(ts, int(tokens[0]))
            self.n_past += 1
            ts.sampler, ts.t0, self._pending = sampler, t0, ts
            ts.t1 = time.perf_counter()
            return
        tokens = [int(t) for t in tokens]
        self._check(tokens)
        head = sampler.device_head()
        if head is None or not self._runs_head(head):
            t0 = time.perf_counter()
            self._pending = (sampler(finite(self.eval(tokens, all_logits=False), self.n_past)[-1]),)
            self._count(tokens, time.perf_counter() - t0)
            return
        for i in range(0, len(tokens) - self.n_batch, self.n_batch):
            self._eval_chunk(tokens[i:i + self.n_batch], False)
        last = tokens[(len(tokens) - 1) // self.n_batch * self.n_batch:]
        t0 = time.perf_counter()
        step = self._run(last, False, head)
        ts = self._token_lane.token
        if len(last) == 1 and ts is not None:
            ts.sampler, ts.t0, ts.t1, self._pending = sampler, t0, time.perf_counter(), ts
        else:
            self._pending = (step, sampler, last, t0, time.perf_counter())

    def result(self) -> int:
        """The token chosen by the last `submit` (waiting for the device)."""
        pending, self._pending = self._pending, None
        if pending.__class__ is TokenStep:
            pending.runner.synchronize()
            t2 = time.perf_counter()
            token = self._choose(pending.picks, pending.values, pending.greedy, pending.sampler)
            t3 = time.perf_counter()
            stats = self.stats
            stats.compute_s += t3 - pending.t0
            stats.tokens += 1
            stats.token_host_s += (pending.t1 - pending.t0) + (t3 - t2)
            return token
        if not pending:
            raise RuntimeError("GraphModel.result() without a submit() before it")
        if len(pending) == 1:
            return pending[0]
        step, sampler, last, t0, t1 = pending
        runner = self._lanes[len(last) == 1].runner
        runner.synchronize()
        t2 = time.perf_counter()
        picks, values = (runner.get(t).reshape(-1) for t in (step.picks, step.values))
        token = self._choose(picks, values, step.key[3][0] == "argmax", sampler)
        t3 = time.perf_counter()
        self.stats.compute_s += t3 - t0
        self._count(last, (t1 - t0) + (t3 - t2))
        return token

    def _choose(self, picks, values, argmax: bool, sampler) -> int:
        """The token among the sampling head's `picks` (ids, best first) with logits `values`: the first for argmax,
        else the sampler's draw; NonFiniteLogitsError when the best logit is not finite."""
        if not math.isfinite(values[0]):     # NaN and +inf rank first: the best is finite iff they are absent
            raise NonFiniteLogitsError(f"the logits after {self.n_past} tokens are not finite (the largest is "
                                       f"{values[0]})")
        return int(picks[0]) if argmax else sampler.choose(picks, values)

    def _count(self, tokens: list, host_s: float):
        """Count a single-token evaluation (generation) and its host time."""
        if len(tokens) == 1:
            self.stats.tokens += 1
            self.stats.token_host_s += host_s

    def _runs_head(self, head: tuple) -> bool:
        """Whether the backend runs the sampling head's ops (else the logits come to the host)."""
        hit = self._heads.get(head)
        if hit is None:
            probe = ggpy.Context().new_tensor(ggpy.F32, (self.hp.n_vocab, 1))
            pick = ggpy.argmax(probe) if head[0] == "argmax" else ggpy.top_k(probe, head[1])
            hit = self._heads[head] = self.backend.supports_op(pick)
        return hit
