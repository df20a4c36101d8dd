"""Choosing the next token from logits, in the order of llama.cpp's common sampler chain:
top-k -> top-p -> temperature -> a draw from the softmax (`--temp 0` is greedy: the largest logit).

top-k keeps the k largest logits (k <= 0: all); top-p then keeps the fewest of those, largest first, whose
probabilities (softmax of the kept logits, before the temperature) add up to at least p (p >= 1: all); the
temperature divides the survivors' logits. Draws come from a numpy Generator seeded with `seed`.
"""
from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


MAX_DEVICE_K = 256      # the most candidates a device's top_k hands to the host (more: the logits come whole)


class Sampler:
    """`sampler(logits)` -> the next token id; `temp <= 0` is greedy. A model that computes on a device may ask
    `device_head()` what to compute there (the argmax, or the top k) and `choose(ids, logits)` among those."""

    def __init__(self, temp: float = 0.8, top_k: int = 40, top_p: float = 0.95, seed: int | None = None):
        self.temp, self.top_k, self.top_p = temp, top_k, top_p
        self.rng = np.random.default_rng(seed)

    def device_head(self) -> tuple | None:
        """What a device computes from the logits so that only it crosses to the host: ("argmax",) for greedy,
        ("top_k", k) for top-k sampling with k <= MAX_DEVICE_K, None (the whole logits) otherwise."""
        if self.temp <= 0:
            return ("argmax",)
        return ("top_k", self.top_k) if 0 < self.top_k <= MAX_DEVICE_K else None

    def _pick(self, ids: np.ndarray, logits: np.ndarray) -> tuple:
        """(ids, probabilities) after top-p and the temperature of candidates `ids` with `logits` (float64),
        largest first and at most top_k of them."""
        if self.top_p < 1:
            cum = np.cumsum(softmax(logits))
            keep = int(np.searchsorted(cum, self.top_p)) + 1           # the first prefix reaching top_p
            ids, logits = ids[:keep], logits[:keep]
        with np.errstate(over="ignore"):
            z = logits / self.temp
        if not np.isfinite(z).all():        # a temperature so near 0 that z overflows: its limit, the largest logit
            z = np.where(logits == logits.max(), 0.0, -np.inf)
        return ids, softmax(z)

    def candidates(self, logits) -> tuple:
        """(ids, probabilities) left after top-k, top-p and the temperature, largest first."""
        logits = np.asarray(logits, dtype=np.float64)
        ids = np.argsort(-logits, kind="stable")
        if 0 < self.top_k < len(ids):
            ids = ids[:self.top_k]
        return self._pick(ids, logits[ids])

    def choose(self, ids, logits) -> int:
        """The next token among the top-k candidates `ids` (largest logit first, ties by lower id, as top_k gives
        them) with their `logits`: the same draw `sampler(all logits)` makes."""
        ids, p = self._pick(np.asarray(ids), np.asarray(logits, dtype=np.float64))
        return int(ids[self.rng.choice(len(ids), p=p)])

    def __call__(self, logits) -> int:
        if self.temp <= 0:
            return int(np.argmax(logits))
        ids, p = self.candidates(logits)
        return int(ids[self.rng.choice(len(ids), p=p)])
