"""A request's life in a slot: its sampler, the text it has produced and the stop-string check.

Text is released as tokens complete it, except a tail that may be the start of a stop string (held back until the
next token settles it); a stop string found ends the text just before it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ggpy.models.llama.generate import NonFiniteLogitsError, finite
from ggpy.models.llama.sampling import Sampler


@dataclass
class Params:
    """Per-request generation settings (llama-server's / OpenAI's names). max_tokens None: until the slot's context
    is full."""

    max_tokens: int | None = 16
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    seed: int | None = None
    stop: list = field(default_factory=list)
    ignore_eos: bool = False

    def check(self):
        """ValueError for settings no request may have."""
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 0):
            raise ValueError(f"max_tokens must be an integer >= 0, got {self.max_tokens!r}")
        if not 0 < self.top_p <= 1 or self.temperature < 0:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError("stop strings must be non-empty strings")


@dataclass
class Event:
    """What on_event receives: per token, the text it releases (`text`, possibly "", and `token`); at the end, text
    held back until then (token None) if any, then one event with finish_reason "stop" | "length" | "error" (with
    `message`) and usage {prompt_tokens, completion_tokens}."""

    text: str = ""
    token: int | None = None
    finish_reason: str | None = None
    usage: dict | None = None
    message: str | None = None


class Handle:
    """A submitted request: `cancel()` (thread-safe) asks the engine to drop it; its slot is freed within a step."""

    def __init__(self, prompt: list, params: Params, on_event):
        self.prompt, self.params, self.on_event = prompt, params, on_event
        self.cancelled = threading.Event()

    def cancel(self):
        self.cancelled.set()


def held_back(text: str, stops: list) -> int:
    """How many characters at the end of `text` may be the start of a stop string."""
    n = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), n, -1):
            if text.endswith(s[:k]):
                n = k
                break
    return n


class Request:
    """A request in its slot: the tokens generated, the text released and the sampler (seeded per request)."""

    def __init__(self, handle: Handle, stream):
        p = handle.params
        self.handle, self.params, self.stream = handle, p, stream
        self.sampler = Sampler(p.temperature, p.top_k, p.top_p, p.seed)
        self.generated = []
        self.text = ""          # the text of the tokens generated
        self.sent = 0           # characters of it released

    def emit(self, event: Event):
        """Call on_event; one that raises cancels its request (the other requests go on)."""
        try:
            self.handle.on_event(event)
        except Exception:  # noqa: BLE001 - the caller's callback failing is its request's end, not the engine's
            self.handle.cancel()

    def sample(self, logits) -> int:
        """The next token from a slot's logits (n_vocab,): greedy the argmax; top-k sampling from the k best
        (a partition, then the sampler's own order: larger logit first, ties to the lower id), the same draw as the
        sampler's over the whole logits at a fraction of its sort."""
        s = self.sampler
        if s.temp <= 0 or not 0 < s.top_k < len(logits):
            return s(logits)
        kth = -np.partition(-logits, s.top_k - 1)[s.top_k - 1]
        above = np.flatnonzero(logits > kth)
        ids = np.concatenate([above, np.flatnonzero(logits == kth)[:s.top_k - len(above)]])
        ids = ids[np.lexsort((ids, -logits[ids]))]
        return s.choose(ids, logits[ids])

    def next_token(self, ids, values, logits) -> int:
        """The next token from the device's sampling head of the slot's row (BatchModel.decode_top: `ids` the K best
        token ids, largest logit first, equal ones by lower id, `values` their logits; None where not computed) or, where
        the sampler needs them (Sampler.device_head None), the whole `logits` (n_vocab,): the draw `sample` makes.
        NonFiniteLogitsError where the logits are not all finite (NaN and +inf rank first in the head)."""
        head = self.sampler.device_head()
        if head is None or ids is None:
            return self.sample(finite(logits, len(self.generated)))
        if not np.isfinite(values[0]):
            raise NonFiniteLogitsError(f"the logits after {len(self.generated)} generated tokens are not finite (the "
                                       f"largest is {values[0]})")
        if head[0] == "argmax":
            return int(ids[0])
        return self.sampler.choose(ids[:head[1]], values[:head[1]])

    def push(self, token: int) -> bool:
        """Take a generated token: send its released text; True when a stop string ended the text."""
        self.generated.append(token)
        self.text += self.stream.push(token)
        # a stop string starts in the unreleased text: held_back never releases a prefix of one
        hits = [i for i in (self.text.find(s, self.sent) for s in self.params.stop) if i >= 0]
        end = min(hits) if hits else len(self.text) - held_back(self.text, self.params.stop)
        delta, self.sent = self.text[self.sent:max(end, self.sent)], max(end, self.sent)
        self.emit(Event(text=delta, token=token))
        return bool(hits)

    def finish(self, reason: str, n_prompt: int, stopped_by_string: bool = False, message: str | None = None):
        """Send what is held back (unless a stop string ended the text) and the final event."""
        if not stopped_by_string and reason != "error":
            rest = self.text[self.sent:] + self.stream.flush()
            if rest:
                self.emit(Event(text=rest))
        self.emit(Event(finish_reason=reason, message=message,
                        usage={"prompt_tokens": n_prompt, "completion_tokens": len(self.generated)}))
