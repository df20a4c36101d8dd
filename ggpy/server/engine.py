"""The engine behind ggpy-server: requests queued, served in n_parallel slots by continuous batching.

One background thread steps: it admits waiting requests into free slots (the slot whose cached tokens share the
longest prefix with the prompt: only the rest is read, the prompt cache), then evaluates one batch (batch.BatchModel)
holding the next token of every generating slot and chunks of the prompts being read (n_batch tokens at most),
chooses each slot's next token with its own sampler (from the batch's sampling head on the device, ids and K logits a
slot: BatchModel.decode_top; the whole logits only for a sampler that needs them), sends the events and frees the
slots that finished. A request joins between steps and leaves when done (a stop string, an end-of-generation token,
max_tokens, a full slot, or cancel). With `warmup`, the thread spends idle time planning the graphs of the generating
steps ahead (BatchModel.decode_keys, a key at a time between requests), so that a first burst of clients does not wait
for them (~90 ms a key on an H200, 0.3-0.5 s on the CPU, where the first also compiles kernels).

    eng = Engine("model.gguf", n_ctx=4096, n_parallel=4); eng.start()
    h = eng.submit(tokens, Params(max_tokens=16, temperature=0), on_event)     # QueueFull, ValueError
    h.cancel(); eng.stats(); eng.stop()
"""
from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

from ggpy.models.llama.batch import BatchModel
from ggpy.models.llama.chat import render_chat
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.tokenizer import Tokenizer

from .slots import Event, Handle, Params, Request

__all__ = ["Engine", "Event", "Handle", "Params", "QueueFull"]
RATE_WINDOW = 10.0      # seconds of generated tokens tokens_per_s averages over


class QueueFull(RuntimeError):
    """max_queue requests already wait."""


class Slot:
    """A range of the KV cache: the tokens it holds (`cached`, kept after a request for the prompt cache) and the
    request in it with the prompt tokens still to read (`todo`) or, generating, the last token sampled."""

    def __init__(self, seq: int):
        self.seq, self.cached, self.request, self.todo, self.n_prompt = seq, [], None, [], 0


def common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Engine:
    """See the module docstring; model_path a llama-family GGUF, backend "cpu" | "cuda", n_ctx the KV cells shared by
    n_parallel slots (each n_ctx // n_parallel), n_batch the most tokens per evaluation, max_queue the waiting bound,
    warmup: plan the generating steps while idle."""

    def __init__(self, model_path, backend="cpu", n_threads: int | None = None, n_ctx: int = 4096,
                 n_parallel: int = 4, n_batch: int = 512, max_queue: int = 64, warmup: bool = False):
        if n_parallel < 1 or n_ctx < n_parallel or max_queue < 0:
            raise ValueError(f"need 1 <= n_parallel <= n_ctx and max_queue >= 0, got {n_parallel}, {n_ctx}, "
                             f"{max_queue}")
        self.model_path, self.backend, self.n_threads = str(model_path), backend, n_threads
        self.n_ctx, self.n_parallel, self.n_batch, self.max_queue = n_ctx, n_parallel, n_batch, max_queue
        self.n_ctx_slot, self.warmup = n_ctx // n_parallel, warmup
        self._ahead = []            # keys left to plan while idle
        self.model_name = Path(model_path).stem
        self.gguf = open_llama(model_path)
        self.tokenizer = Tokenizer(self.gguf.metadata, self.gguf.path, self.gguf.hparams.n_vocab)
        self.model = None
        self.ready = False
        self.slots = [Slot(i) for i in range(n_parallel)]
        self._queue = collections.deque()
        self._cv = threading.Condition()
        self._thread = None
        self._running = False
        self._counts = {"requests": 0, "tokens_generated": 0, "tokens_prompt": 0}
        self._recent = collections.deque()     # (time, tokens generated in that step)

    # -- life -----------------------------------------------------------------------------------------------
    def start(self):
        """Load the weights and reserve the memory (ready: True), then step in a background thread."""
        self.model = BatchModel(self.gguf, self.backend, self.n_threads, self.n_ctx, self.n_parallel, self.n_batch)
        self._ahead = self.model.decode_keys() if self.warmup else []
        self.ready = True
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="ggpy-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop stepping (requests in flight end with an "error" event)."""
        with self._cv:
            self._running = False
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
        for slot in self.slots:
            if slot.request is not None:
                self._end(slot, "error", message="the server stopped")
        while self._queue:
            Request(self._queue.popleft(), self.tokenizer.stream()).finish("error", 0, message="the server stopped")

    # -- the interface ----------------------------------------------------------------------------------------
    def chat(self, messages: list) -> str:
        """The prompt text of `messages` under the model's chat template (jinja2 sandbox; ChatTemplateError)."""
        tok = self.tokenizer
        bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
        eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
        return render_chat(tok.chat_template, messages, bos, eos)

    def submit(self, prompt_tokens: list, params: Params, on_event) -> Handle:
        """Queue a request (thread-safe): ValueError for a bad prompt or params, QueueFull when max_queue wait."""
        tokens = [int(t) for t in prompt_tokens]
        params.check()
        n_vocab = self.gguf.hparams.n_vocab
        if not tokens:
            raise ValueError("the prompt has no tokens")
        if len(tokens) > self.n_ctx_slot:
            raise ValueError(f"the prompt has {len(tokens)} tokens, more than a slot's context of {self.n_ctx_slot}")
        if min(tokens) < 0 or max(tokens) >= n_vocab:
            raise ValueError(f"token ids must lie in [0, {n_vocab})")
        handle = Handle(tokens, params, on_event)
        with self._cv:
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are waiting (the bound is {self.max_queue})")
            self._queue.append(handle)
            self._cv.notify_all()
        return handle

    def stats(self) -> dict:
        now = time.monotonic()
        with self._cv:
            while self._recent and self._recent[0][0] < now - RATE_WINDOW:
                self._recent.popleft()
            rate = sum(n for _, n in self._recent) / RATE_WINDOW
            return {**self._counts, "slots_busy": sum(s.request is not None for s in self.slots),
                    "queue_length": len(self._queue), "tokens_per_s": rate, "graphs_to_plan": len(self._ahead)}

    # -- stepping ---------------------------------------------------------------------------------------------
    def _idle(self) -> bool:
        return not self._queue and all(s.request is None for s in self.slots)

    def _loop(self):
        while True:
            with self._cv:
                while self._running and self._idle() and not self._ahead:
                    self._cv.wait()
                if not self._running:
                    return
                idle = self._idle()
                if not idle:
                    self._admit()
            if idle:
                try:
                    self.model.prepare(self._ahead.pop(0))
                except Exception:  # noqa: BLE001 - the step that meets the key reports it to its requests
                    self._ahead = []
                continue
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - a failed evaluation ends its requests, not the server
                for slot in self.slots:
                    if slot.request is not None:
                        slot.cached = []
                        self._end(slot, "error", message=f"{type(e).__name__}: {e}")

    def _admit(self):
        """Move waiting requests into free slots (called holding the lock): the free slot sharing the longest
        prefix with the prompt, ties to the lowest (fewer cache rows read)."""
        while self._queue:
            free = [s for s in self.slots if s.request is None]
            if not free:
                return
            handle = self._queue.popleft()
            if handle.cancelled.is_set():
                continue
            slot = max(free, key=lambda s: (common_prefix(s.cached, handle.prompt), -s.seq))
            keep = min(common_prefix(slot.cached, handle.prompt), len(handle.prompt) - 1)
            slot.request, slot.n_prompt = Request(handle, self.tokenizer.stream()), len(handle.prompt)
            slot.cached, slot.todo = handle.prompt[:keep], handle.prompt[keep:]
            self._counts["requests"] += 1
            self._counts["tokens_prompt"] += len(slot.todo)
            if handle.params.max_tokens == 0:
                self._end(slot, "length")

    def step(self):
        """One evaluation: the next token of each generating slot and prompt chunks in the room left."""
        for slot in self.slots:
            if slot.request is not None and slot.request.handle.cancelled.is_set():
                slot.request, slot.todo = None, []
        busy = [s for s in self.slots if s.request is not None]
        if not busy:
            return
        takes = self._takes(busy)
        parts, done = [], []
        for slot, n in takes:
            parts.append((slot.seq, len(slot.cached), slot.todo[:n]))
            slot.cached += slot.todo[:n]        # in place: a slot's own list (_admit slices it)
            slot.todo = slot.todo[n:]
            if not slot.todo:
                done.append(slot)
        full = any(slot.request.sampler.device_head() is None for slot in done)
        out = self.model.decode_top(parts, logits=full)      # ids, values of the sampling head; logits when full
        rows = {p[0]: i for i, p in enumerate(parts)}
        n_gen = 0
        for slot in done:
            j = rows[slot.seq]
            self._next(slot, *(None if a is None else a[j] for a in out))
            n_gen += 1
        with self._cv:
            self._counts["tokens_generated"] += n_gen
            self._recent.append((time.monotonic(), n_gen))

    def _takes(self, busy: list) -> list:
        """[(slot, tokens it reads this step)]: each generating slot's token, then prompt chunks in the room left of
        n_batch. On the CPU, with generating slots, the prompt chunks end where the step fills a graph bucket
        exactly (the tokens over the largest bucket below the total ride along with the next step, which the
        generating slots need anyway), so no step pads a prompt chunk: a 67-token step would compute 96. Not on
        CUDA, where a step costs about the same padded and a prompt spread over more steps idles its slot (H200, 16
        clients: 3690 -> 2543 tok/s with the cut)."""
        gen = [[s, 1] for s in busy if len(s.todo) == 1]
        room = self.model.n_batch - len(gen)
        takes = []
        for slot in (s for s in busy if len(s.todo) > 1):
            if room > 0:
                takes.append([slot, min(len(slot.todo), room)])
                room -= takes[-1][1]
        total = len(gen) + sum(n for _, n in takes)
        over = total - max(b for b in self.model.buckets if b <= total) if gen and self.model.backend.name == "cpu" \
            else 0
        while over > 0 and takes:
            cut = min(over, takes[-1][1])
            takes[-1][1] -= cut
            over -= cut
            if takes[-1][1] == 0:
                takes.pop()
        return gen + takes

    def _next(self, slot: Slot, ids, values, logits):
        """Choose the slot's next token (Request.next_token), send it, and end the request or queue the token to be
        read."""
        req = slot.request
        token = req.next_token(ids, values, logits)
        p = req.params
        if token in self.tokenizer.eog_ids and not p.ignore_eos:
            req.generated.append(token)
            return self._end(slot, "stop")
        if req.push(token):
            return self._end(slot, "stop", stopped_by_string=True)
        if p.max_tokens is not None and len(req.generated) >= p.max_tokens:
            return self._end(slot, "length")
        if len(slot.cached) >= self.n_ctx_slot:
            return self._end(slot, "length")
        slot.todo = [token]

    def _end(self, slot: Slot, reason: str, stopped_by_string: bool = False, message: str | None = None):
        req, slot.request, slot.todo = slot.request, None, []
        req.finish(reason, slot.n_prompt, stopped_by_string, message)
