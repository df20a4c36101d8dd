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


def finite(logits, n_read: int):
    """`logits` (of the tokens up to `n_read`) when all are finite; else NonFiniteLogitsError saying how many are not."""
    bad = ~np.isfinite(np.asarray(logits))
    if bad.any():
        raise NonFiniteLogitsError(f"the logits after {n_read} tokens are not finite ({int(bad.sum())} of {bad.size} "
                                   f"are NaN or infinite)")
    return logits


@dataclass
class Generation:
    """What `generate` made: the new token ids, the logits of every position (when kept) and the times: reading the
    prompt (with choosing the first token), the first generated token's evaluation (its graph planned and, on CUDA,
    captured) and the `n_steady` evaluations after it."""

    tokens: list
    logits: np.ndarray | None     # float32 (n_prompt + len(tokens) - 1, n_vocab)
    prompt_s: float
    first_token_s: float
    gen_s: float
    n_steady: int

    def rates(self, n_prompt: int) -> tuple:
        """(prompt tokens/s, generated tokens/s in the steady state: after the first generated token's evaluation,
        or including it when it is the only one)."""
        steady = self.n_steady / self.gen_s if self.n_steady and self.gen_s else 0.0
        first = 1 / self.first_token_s if self.first_token_s else 0.0
        return (n_prompt / self.prompt_s if self.prompt_s else 0.0, steady or first)


def generate(model, prompt: list, n_predict: int, sampler, stop_ids=frozenset(), on_token=None,
             keep_logits: bool = False) -> Generation:
    """Read `prompt`, then sample up to `n_predict` tokens, each fed back, stopping after a token in `stop_ids`.
    `on_token(id)` is called as each one is chosen. The last token chosen is not evaluated (nothing needs its
    logits), so the kept logits have one row per token read. Logits that are not all finite stop it with
    NonFiniteLogitsError (no token is drawn from NaN). A model with `next_token(tokens, sampler)` (GraphModel)
    chooses the tokens itself, on its device, unless the logits are kept; with `submit` and `result` (GraphModel's two
    halves of next_token) each token's evaluation is queued before on_token runs for the token before it."""
    if keep_logits or not hasattr(model, "next_token"):
        kept = []

        def step(tokens):
            logits = finite(model.eval(tokens, all_logits=keep_logits), n_read + len(tokens))
            if keep_logits:
                kept.append(np.asarray(logits, dtype=np.float32))
            return sampler(logits[-1])
    else:
        def step(tokens):
            return model.next_token(tokens, sampler)
    n_read = 0
    times = [time.perf_counter()]
    token = step(list(prompt))
    n_read, tokens = len(prompt), []
    times.append(time.perf_counter())
    ahead = not keep_logits and hasattr(model, "submit")    # the next token queued before on_token's work
    for i in range(n_predict):
        tokens.append(token)
        more = token not in stop_ids and i < n_predict - 1
        queued = more and ahead and model.n_past < model.n_ctx     # a full context: step raises after on_token
        if queued:
            model.submit([token], sampler)
        if on_token is not None:
            on_token(token)
        if not more:
            break
        token = model.result() if queued else step([token])
        n_read += 1
        times.append(time.perf_counter())
    first = times[2] - times[1] if len(times) > 2 else 0.0
    return Generation(tokens, np.concatenate(kept) if keep_logits else None, times[1] - times[0], first,
                      times[-1] - times[2] if len(times) > 2 else 0.0, max(len(times) - 3, 0))
