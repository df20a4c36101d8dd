"""Several sequences in one evaluation: the model behind a server's slots (llama.cpp's unified KV cache split into
n_seq ranges, llama-server's -c / -np).

The KV cache's n_ctx rows are split into n_seq ranges of n_ctx_seq = n_ctx // n_seq rows; sequence s keeps the keys
and values of its position p in row s * n_ctx_seq + p. One `decode` evaluates a batch of parts, each some tokens of
one sequence after the positions it already holds, in one graph: each token carries its sequence's position, its
cache row (Inputs.cells) and a mask row that lets it see only its own sequence's rows up to its position (and,
sliding, the last n_swa of them). The graph computes the logits of each part's last token only (Inputs.out_ids).
Graphs are keyed by (the token count rounded up to a bucket (`buckets`), the cache rows read rounded up to KV_PAD) and kept
planned, so a step replays one; the padding tokens write to a spare cache row that no graph reads.
"""
from __future__ import annotations

import time

import numpy as np

import ggpy
from ggpy.backends import make_backend

from .gguf_file import LlamaGGUF
from .model import KVCache, cache_types, flash_attention, forward, new_inputs
from .runner import KEEP, KV_PAD, Stats


def buckets(n_batch: int) -> list:
    """Token counts a graph is built for: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers of two and 1.5 times them: a
    batch pads at most a third) below n_batch, then n_batch."""
    out = sorted({b for k in range(n_batch.bit_length()) for b in (1 << k, 3 << k >> 1) if 0 < b < n_batch})
    return out + [n_batch]


class BatchModel:
    """`decode(parts)` reads parts [(seq, n_past, tokens), ...] (at most one per sequence; tokens after the n_past
    positions sequence `seq` holds, at most n_batch in all) and returns the logits float32 (len(parts), n_vocab) of
    each part's last token. A sequence's positions past n_past are forgotten by reading new ones at n_past (the
    prompt cache: a new text sharing a prefix with the cached one reads only the rest).

    backend, n_threads, n_batch, flash_attn, cache_type_k/v: as GraphModel's; n_ctx: cache rows of all sequences;
    n_seq: the sequences (each n_ctx // n_seq positions)."""

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
        self.buckets = buckets(self.n_batch)
        self.backend = make_backend(backend, n_threads) if isinstance(backend, str) else backend
        self.flash_attn = flash_attention(hp, self.backend, flash_attn, *types)
        self.weights = ggpy.load_gguf(model.path, self.backend, architecture=hp.arch)
        self.cache = KVCache(hp, n_ctx, self.backend, *types, spare=1)
        self.cache.buffer.fill(0, self.cache.buffer.size, 0)      # rows read under the mask: never NaN
        self.stats = Stats()
        self._steps = {}
        worst = self._build((self.n_batch, n_ctx))[0]
        self.runner = ggpy.GraphRunner(None, self.backend, reserve=worst, keep=KEEP)
        self._steps.clear()
        self._key = None
        self.stats = Stats()

    def _build(self, key: tuple) -> tuple:
        """(graph, inputs, logits) of key (n_tokens, n_kv): logits ne (n_vocab, n_seq)."""
        t0 = time.perf_counter()
        inputs = new_inputs(ggpy.Context(), key[0], key[1], self.hp, n_out=self.n_seq)
        logits = forward(self.weights, self.hp, self.cache, inputs, False, self.flash_attn)
        graph = ggpy.Graph().build_forward_expand(logits)
        self.stats.graphs_built += 1
        self.stats.build_s += time.perf_counter() - t0
        return graph, inputs, logits

    def _use(self, key: tuple) -> tuple:
        """The step of `key`, planned in the runner (kept: the last KEEP keys met replay their plans)."""
        step = self._steps.pop(key, None) or self._build(key)
        self._steps[key] = step
        while len(self._steps) > KEEP:
            del self._steps[next(iter(self._steps))]
        if self._key != key:
            t0 = time.perf_counter()
            self.runner.use(step[0])
            self._key = key
            self.stats.plan_s += time.perf_counter() - t0
        return step

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

    def inputs(self, parts: list, inp) -> dict:
        """The graph's inputs (by name) for `parts`, padded to n_tokens tokens (token 0 at position 0 writing the
        spare row n_ctx, seeing row 0: finite, and read by nobody)."""
        n, n_tokens, n_kv = sum(len(p[2]) for p in parts), inp.n_tokens, inp.n_kv
        tokens = np.zeros(n_tokens, np.int32)
        pos = np.zeros(n_tokens, np.int32)
        base = np.zeros(n_tokens, np.int64)
        cells = np.full(n_tokens, self.n_ctx, np.int32)
        out_ids = np.zeros(self.n_seq, np.int32)
        i = 0
        for j, (seq, n_past, toks) in enumerate(parts):
            k = len(toks)
            tokens[i:i + k] = toks
            pos[i:i + k] = np.arange(n_past, n_past + k)
            base[i:i + k] = seq * self.n_ctx_seq
            cells[i:i + k] = base[i:i + k] + pos[i:i + k]
            i += k
            out_ids[j] = i - 1
        last = base + pos                                   # a padding token: row 0 only (base 0, pos 0)
        rows = np.arange(n_kv)[None, :]
        see = (rows >= base[:, None]) & (rows <= last[:, None])
        out = {"tokens": tokens, "pos": pos, "cells": cells, "out_ids": out_ids}
        if inp.mask is not None:
            out["kq_mask"] = np.where(see, 0.0, -np.inf).astype(np.float32).reshape(1, 1, n_tokens, n_kv)
        if inp.mask_swa is not None:
            first = np.where(np.arange(n_tokens) < n, last - self.hp.n_swa + 1, 0)
            swa = np.where(see & (rows >= first[:, None]), 0.0, -np.inf).astype(np.float32)
            out["kq_mask_swa"] = swa.reshape(1, 1, n_tokens, n_kv)
        return out

    def decode(self, parts: list) -> np.ndarray:
        """Logits float32 (len(parts), n_vocab): row j after part j's last token."""
        parts = [(int(s), int(p), [int(t) for t in toks]) for s, p, toks in parts]
        self.check(parts)
        t0 = time.perf_counter()
        n = sum(len(p[2]) for p in parts)
        n_tokens = next(b for b in self.buckets if b >= n)
        end = max(s * self.n_ctx_seq + p + len(t) for s, p, t in parts)
        n_kv = min(self.n_ctx, -(-end // KV_PAD) * KV_PAD)
        _, inp, logits = self._use((n_tokens, n_kv))
        self.runner.set(**self.inputs(parts, inp))
        self.runner.compute()
        out = self.runner.get(logits).reshape(self.n_seq, self.hp.n_vocab)[:len(parts)]
        self.stats.compute_s += time.perf_counter() - t0
        return out
