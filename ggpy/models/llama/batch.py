"""Several sequences in one evaluation: the model behind a server's slots (llama.cpp's unified KV cache split into
n_seq ranges, llama-server's -c / -np).

The KV cache's n_ctx rows are split into n_seq ranges of n_ctx_seq = n_ctx // n_seq rows; sequence s keeps the keys
and values of its position p in row s * n_ctx_seq + p. One `decode` evaluates a batch of parts, each some tokens of
one sequence after the positions it already holds, in one graph: each token carries its sequence's position, its
cache row (Inputs.cells) and a mask row that lets it see only its own sequence's rows up to its position (and,
sliding, the last n_swa of them). The graph computes the logits of each part's last token only (Inputs.out_ids) and,
where the backend runs top_k, a sampling head on them (`decode_top`: only token ids and K logits a part cross to the
host).

Graphs are keyed by (the token count rounded up to a bucket (`buckets`), the cache rows read rounded up to a class
(`kv_classes`: KV_PAD times a power of two, or n_ctx)): len(buckets(n_batch)) * len(kv_classes(n_ctx)) keys at most
(126 for n_batch 512 and n_ctx 16384: 18 buckets, 7 classes), each built and planned the first time it is met and kept
planned for good, so a running server replays one per step and plans nothing once it has met its keys. The padding
tokens write to a spare cache row that no graph reads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import ggpy
from ggpy.backends import make_backend

from .gguf_file import LlamaGGUF
from .model import Inputs, KVCache, cache_types, flash_attention, forward, mask_ramp, mask_rows, new_inputs
from .runner import KV_PAD, Stats
from .sampling import MAX_DEVICE_K


def buckets(n_batch: int) -> list:
    """Token counts a graph is built for: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5 times them: a
    batch pads at most a third) below n_batch, then n_batch."""
    out = sorted({b for k in range(n_batch.bit_length()) for b in (1 << k, 3 << k >> 1) if 0 < b < n_batch})
    return out + [n_batch]


def kv_classes(n_ctx: int) -> list:
    """Cache row counts a graph attends over: KV_PAD, 2 KV_PAD, 4 KV_PAD, ... below n_ctx, then n_ctx (attention
    reads at most twice the rows in use; 1 + ceil(log2(n_ctx / KV_PAD)) classes)."""
    return [KV_PAD << k for k in range(n_ctx.bit_length()) if KV_PAD << k < n_ctx] + [n_ctx]


class Mask:
    """A mask input's host values, F32 numpy (n_tokens, n_kv) of ne (n_kv, n_tokens): its plan's staged (pinned)
    array (`source`: as GraphRunner.staged gave it), or the model's own of (n_batch, n_ctx) whose top-left corner is
    set each step. -inf but over the blocks `write` wrote last (`dirty`: rows, cache rows), which the next write
    resets first: a step touches the rows its parts see, never the whole n_tokens x n_kv. `n_swa`: the sliding
    window (0: causal); `ramp`: mask_ramp(n_ctx_seq, n_swa), whose windows are a part's rows."""

    def __init__(self, array: np.ndarray, ramp: np.ndarray, n_swa: int, source=None):
        self.array, self.ramp, self.n_swa, self.source = array, ramp, n_swa, source
        array.fill(-np.inf)
        self.dirty = []

    def write(self, parts: list, n_ctx_seq: int, n_tokens: int):
        """Rows for `parts` [(seq, n_past, tokens)] one after the other, then padding rows up to n_tokens that see
        cache row 0 only (finite, and read by nobody): a part's token j sees its sequence's rows n_past + j - n_swa
        < p <= n_past + j (every p <= n_past + j without a window)."""
        a, dirty = self.array, []
        for r0, r1, c0, c1 in self.dirty:
            a[r0:r1, c0:c1] = -np.inf
        i = 0
        for seq, n_past, tokens in parts:
            k, end, base = len(tokens), n_past + len(tokens), seq * n_ctx_seq
            lo = max(0, n_past + 1 - self.n_swa) if self.n_swa else 0      # the first row any of its tokens sees
            a[i:i + k, base + lo:base + end] = mask_rows(self.ramp, n_past, k, end)[0, 0, :, lo:]
            dirty.append((i, i + k, base + lo, base + end))
            i += k
        if i < n_tokens:
            a[i:n_tokens, 0] = 0.0
            dirty.append((i, n_tokens, 0, 1))
        self.dirty = dirty


@dataclass
class BatchStep:
    """One built graph of key (n_tokens, n_kv): its inputs, logits (ne (n_vocab, n_seq)), with the sampling head
    `ids` (I32 ne (K, n_seq): each column's K largest logits, largest first, equal ones by lower id) and `values`
    (F32 ne (1, K, n_seq): those logits); `masks`: [(input tensor, Mask)] as the runner last switched to it."""

    key: tuple
    graph: ggpy.Graph
    inputs: Inputs
    logits: ggpy.Tensor
    ids: ggpy.Tensor | None = None
    values: ggpy.Tensor | None = None
    masks: list = field(default_factory=list)


class BatchModel:
    """`decode(parts)` reads parts [(seq, n_past, tokens), ...] (at most one per sequence; tokens after the n_past
    positions sequence `seq` holds, at most n_batch in all) and returns the logits float32 (len(parts), n_vocab) of
    each part's last token; `decode_top(parts)` the sampling head's ids and logits instead. A sequence's positions
    past n_past are forgotten by reading new ones at n_past (the prompt cache: a new text sharing a prefix with the
    cached one reads only the rest).

    backend, n_threads, n_batch, flash_attn, cache_type_k/v: as GraphModel's; n_ctx: cache rows of all sequences;
    n_seq: the sequences (each n_ctx // n_seq positions). `top_k`: the K of the sampling head (min(MAX_DEVICE_K,
    n_vocab); 0 where the backend runs no top_k)."""

    def __init__(self, model: LlamaGGUF, backend="cpu", n_threads: int | None = None, n_ctx: int = 4096,
                 n_seq: int = 4, n_batch: int = 512, flash_attn="auto", cache_type_k: str = "f16",
                 cache_type_v: str = "f16"):
        hp = self.hp = model.hparams
        types = cache_types(cache_type_k, cache_type_v)
        if n_seq < 1 or n_ctx < n_seq or n_batch < 1:
            raise ValueError(f"need 1 <= n_seq <= n_ctx and n_batch >= 1, got n_seq {n_seq}, n_ctx {n_ctx}, "
                             f"n_batch {n_batch}")
        self.n_ctx, self.n_seq, self.n_ctx_seq = n_ctx, n_seq, n_ctx // n_seq
        self.n_batch = max(min(n_batch, n_ctx), n_seq)
        self.buckets, self.kv_classes = buckets(self.n_batch), kv_classes(n_ctx)
        self.backend = make_backend(backend, n_threads) if isinstance(backend, str) else backend
        self.flash_attn = flash_attention(hp, self.backend, flash_attn, *types)
        self.weights = ggpy.load_gguf(model.path, self.backend, architecture=hp.arch)
        self.cache = KVCache(hp, n_ctx, self.backend, *types, spare=1)
        self.cache.buffer.fill(0, self.cache.buffer.size, 0)      # rows read under the mask: never NaN
        k = min(MAX_DEVICE_K, hp.n_vocab)
        probe = ggpy.top_k(ggpy.Context().new_tensor(ggpy.F32, (hp.n_vocab, n_seq)), k)
        self.top_k = k if self.backend.supports_op(probe) else 0
        self._ramps = {n_swa: mask_ramp(self.n_ctx_seq, n_swa) for n_swa in {0, hp.n_swa}}
        self._host = {}             # mask name -> the Mask of a runner that stages none
        self.stats = Stats()
        worst = self._build((self.n_batch, n_ctx))
        n_keys = len(self.buckets) * len(self.kv_classes)
        self.runner = ggpy.GraphRunner(None, self.backend, reserve=worst.graph, keep=n_keys)
        self._steps = {worst.key: worst}        # every key met: none is dropped (n_keys at most)
        self._key = None
        self.stats = Stats()

    def _build(self, key: tuple) -> BatchStep:
        """The step of key (n_tokens, n_kv), with the sampling head where the backend runs top_k."""
        t0 = time.perf_counter()
        inputs = new_inputs(ggpy.Context(), key[0], key[1], self.hp, n_out=self.n_seq)
        logits = forward(self.weights, self.hp, self.cache, inputs, False, self.flash_attn)
        step = BatchStep(key, ggpy.Graph().build_forward_expand(logits), inputs, logits)
        if self.top_k:
            step.ids = ggpy.top_k(logits, self.top_k).set_name("top_ids")
            rows = ggpy.reshape_3d(logits, 1, self.hp.n_vocab, self.n_seq)
            step.values = ggpy.get_rows(rows, step.ids).set_name("top_values")
            step.graph.build_forward_expand(step.ids).build_forward_expand(step.values)
        self.stats.graphs_built += 1
        self.stats.build_s += time.perf_counter() - t0
        return step

    def decode_keys(self) -> list:
        """The keys of the steps that only generate (a token for each of 1 .. n_seq sequences) at every class of cache
        rows, fewest tokens first: what a server's steps meet as its slots fill and their texts grow."""
        top = next(b for b in self.buckets if b >= self.n_seq)
        return [(b, c) for b in self.buckets if b <= top for c in self.kv_classes]

    def prepare(self, key: tuple):
        """Build and plan the step of `key` now (kernels bound; on the CPU compiled), as the first batch meeting it
        would: a server's idle time spent so that no request waits for it."""
        self._use(key)

    def _use(self, key: tuple) -> BatchStep:
        """The step of `key`, the runner switched to it (its kept plan replayed once met) and its masks bound."""
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = self._build(key)
        if self._key != key:
            t0 = time.perf_counter()
            self.runner.use(step.graph)
            self._bind(step)
            self._key = key
            self.stats.plan_s += time.perf_counter() - t0
        return step

    def _bind(self, step: BatchStep):
        """The step's masks: where the runner stages a mask input, its pinned array (a new Mask when the plan's
        staging is new: its array starts all -inf), else the model's own, set each step."""
        masks, inp = [], step.inputs
        for tensor, n_swa in ((inp.mask, 0), (inp.mask_swa, self.hp.n_swa)):
            if tensor is None:
                continue
            view = self.runner.staged(tensor)
            old = dict(step.masks).get(tensor)
            if view is None:
                mask = self._host.get(tensor.name)
                if mask is None:
                    mask = self._host[tensor.name] = Mask(np.empty((self.n_batch, self.n_ctx), np.float32),
                                                          self._ramps[n_swa], n_swa)
            else:
                mask = old if old is not None and old.source is view else Mask(
                    view.reshape(inp.n_tokens, inp.n_kv), self._ramps[n_swa], n_swa, view)
            masks.append((tensor, mask))
        step.masks = masks

    def check(self, parts: list):
        """ValueError unless `parts` is a batch decode reads."""
        seqs = [p[0] for p in parts]
        n = sum(len(p[2]) for p in parts)
        if not parts or len(set(seqs)) != len(seqs) or not 0 < n <= self.n_batch:
            raise ValueError(f"a batch holds 1..{self.n_batch} tokens of distinct sequences, got {n} tokens of "
                             f"sequences {seqs}")
        for seq, n_past, tokens in parts:
            if not 0 <= seq < self.n_seq or not tokens or n_past < 0 or n_past + len(tokens) > self.n_ctx_seq:
                raise ValueError(f"sequence {seq} (of {self.n_seq}) cannot read {len(tokens)} tokens after {n_past} "
                                 f"(each holds {self.n_ctx_seq})")
            if min(tokens) < 0 or max(tokens) >= self.hp.n_vocab:
                raise ValueError(f"token ids must lie in [0, {self.hp.n_vocab}), got {min(tokens)}..{max(tokens)}")

    def inputs(self, parts: list, n_tokens: int) -> dict:
        """The graph's token inputs (by name) for `parts`, padded to n_tokens tokens (token 0 at position 0 writing
        the spare row n_ctx); the masks are Mask's."""
        tokens = np.zeros(n_tokens, np.int32)
        pos = np.zeros(n_tokens, np.int32)
        cells = np.full(n_tokens, self.n_ctx, np.int32)
        out_ids = np.zeros(self.n_seq, np.int32)
        i = 0
        for j, (seq, n_past, toks) in enumerate(parts):
            k = len(toks)
            tokens[i:i + k] = toks
            pos[i:i + k] = np.arange(n_past, n_past + k)
            cells[i:i + k] = pos[i:i + k] + seq * self.n_ctx_seq
            i += k
            out_ids[j] = i - 1
        return {"tokens": tokens, "pos": pos, "cells": cells, "out_ids": out_ids}

    def _run(self, parts: list) -> BatchStep:
        """Check `parts`, write the inputs of their step and queue its evaluation."""
        parts = [(int(s), int(p), [int(t) for t in toks]) for s, p, toks in parts]
        self.check(parts)
        n = sum(len(p[2]) for p in parts)
        end = max(s * self.n_ctx_seq + p + len(t) for s, p, t in parts)
        step = self._use((next(b for b in self.buckets if b >= n), next(c for c in self.kv_classes if c >= end)))
        n_tokens, n_kv = step.key
        self.runner.synchronize()           # the staged masks are written in place: nothing may still read them
        self.runner.set(**self.inputs(parts, n_tokens))
        for tensor, mask in step.masks:
            mask.write(parts, self.n_ctx_seq, n_tokens)
            if mask.source is None:
                self.runner[tensor] = mask.array[None, None, :n_tokens, :n_kv]
        self.runner.compute()
        return step

    def _logits(self, step: BatchStep, n: int) -> np.ndarray:
        return self.runner.get(step.logits).reshape(self.n_seq, self.hp.n_vocab)[:n]

    def decode(self, parts: list) -> np.ndarray:
        """Logits float32 (len(parts), n_vocab): row j after part j's last token."""
        t0 = time.perf_counter()
        step = self._run(parts)
        out = self._logits(step, len(parts))
        self.stats.compute_s += time.perf_counter() - t0
        return out

    def decode_top(self, parts: list, logits: bool = False) -> tuple:
        """(ids int32 (len(parts), K), values float32 (len(parts), K), logits): row j the K = top_k largest logits
        after part j's last token (largest first, equal ones by lower id) and their token ids, read from the device
        instead of the logits; `logits` float32 (len(parts), n_vocab) only when asked for, else None. Without the
        head (top_k 0): (None, None, logits)."""
        t0 = time.perf_counter()
        step = self._run(parts)
        n = len(parts)
        ids = values = None
        if step.ids is not None:
            ids = self.runner.get(step.ids).reshape(self.n_seq, self.top_k)[:n]
            values = self.runner.get(step.values).reshape(self.n_seq, self.top_k)[:n]
        out = self._logits(step, n) if logits or ids is None else None
        self.stats.compute_s += time.perf_counter() - t0
        return ids, values, out
