"""The generation loop, independent of what computes the logits.

A model is any object with `eval(tokens, all_logits=True) -> logits`: it reads `tokens` (a list of ids) after those
it has already read (its KV cache) and returns their logits, shape (len(tokens), n_vocab), row i the prediction after
token i (with all_logits=False only the last row, shape (1, n_vocab)); and `n_ctx`, the most tokens it can hold.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


class NonFiniteLogitsError(ValueError):
    """The model computed NaN or infinite logits (corrupt weights, or values overflowing)."""


def _finite(logits, n_read: int):
    """`logits` (of the tokens up to `n_read`) when all are finite; else NonFiniteLogitsError saying how many are not."""
    bad = ~np.isfinite(np.asarray(logits))
    if bad.any():
        raise NonFiniteLogitsError(f"the logits after {n_read} tokens are not finite ({int(bad.sum())} of {bad.size} "
                                   f"are NaN or infinite)")
    return logits


@dataclass
class Generation:
    """What `generate` made: the new token ids, the logits of every position (when kept) and the times."""

    tokens: list
    logits: np.ndarray | None     # float32 (n_prompt + len(tokens) - 1, n_vocab)
    prompt_s: float               # evaluating the prompt
    gen_s: float                  # sampling every new token and evaluating all but the last

    def rates(self, n_prompt: int) -> tuple:
        """(prompt tokens/s, generated tokens/s)."""
        return (n_prompt / self.prompt_s if self.prompt_s else 0.0,
                len(self.tokens) / self.gen_s if self.gen_s else 0.0)


def generate(model, prompt: list, n_predict: int, sampler, stop_ids=frozenset(), on_token=None,
             keep_logits: bool = False) -> Generation:
    """Read `prompt`, then sample up to `n_predict` tokens, each fed back, stopping after a token in `stop_ids`.
    `on_token(id)` is called as each one is chosen. The last token chosen is not evaluated (nothing needs its
    logits), so the kept logits have one row per token read. Logits that are not all finite stop it with
    NonFiniteLogitsError (no token is drawn from NaN)."""
    t0 = time.perf_counter()
    logits = _finite(model.eval(list(prompt), all_logits=keep_logits), len(prompt))
    t1 = time.perf_counter()
    kept = [np.asarray(logits, dtype=np.float32)] if keep_logits else []
    tokens = []
    for i in range(n_predict):
        token = sampler(logits[-1])
        tokens.append(token)
        if on_token is not None:
            on_token(token)
        if token in stop_ids or i == n_predict - 1:
            break
        logits = _finite(model.eval([token]), len(prompt) + len(tokens))
        if keep_logits:
            kept.append(np.asarray(logits, dtype=np.float32))
    t2 = time.perf_counter()
    return Generation(tokens, np.concatenate(kept) if keep_logits else None, t1 - t0, t2 - t1)
