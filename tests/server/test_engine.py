"""The server's engine (ggpy/server/engine.py) on a small random GGUF, CPU: at temperature 0 each request's tokens
equal a lone run through GraphModel (generate, as ggpy-llama --temp 0), also with several requests at once in
different slots and lengths and queued behind them; seeded sampling is reproducible; the prompt cache reads only
the rest of a prompt and gives the same tokens; stop strings, cancel, the queue bound and bad input."""
import threading
import time

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"

from gguf import GGMLQuantizationType as gguf_types
from llama_tiny import DEFAULT_TYPES, write_tiny_llama

from ggpy.models.llama.batch import BatchModel
from ggpy.models.llama.generate import NonFiniteLogitsError, generate
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import GraphModel
from ggpy.models.llama.sampling import Sampler
from ggpy.server.engine import Engine, Params, QueueFull
from ggpy.server.slots import Handle, Request

SEED = int(np.random.SeedSequence().entropy % 2**32)
N_BATCH = 16        # chunks of at most 16 tokens: the mat-mul kernels GraphModel's chunks of 16 use (see below)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """F32 weights: a quantized matrix's CPU product rounds the activations to 8 bits in kernels chosen by the column
    count, and a batch's other columns (or another split of the keys) move a logit by ~1e-3 then, enough to turn a
    seeded draw from a flat distribution (tests/models/test_llama_batch.py's model likewise)."""
    f32 = dict.fromkeys(DEFAULT_TYPES, gguf_types.F32)
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=2, types=f32)


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def backend(request):
    """The backend (cuda: skipped without a GPU)."""
    return request.getfixturevalue("cuda_backend") if request.param == "cuda" else "cpu"


@pytest.fixture(scope="module")
def engine(path, backend):
    eng = Engine(path, backend, 2, n_ctx=256, n_parallel=3, n_batch=N_BATCH, max_queue=16).start()
    yield eng
    eng.stop()


@pytest.fixture(scope="module")
def lone(path, backend):
    """tokens of a lone run through GraphModel (chunks of N_BATCH, as ggpy-llama --batch-size 16; greedy: --temp 0).
    It shares the engine's backend: run it while the engine is idle (a CUDA backend's stream takes one thread at a
    time: a capture of the engine's thread would take in this one's launches)."""
    model = GraphModel(open_llama(path), backend, 2, n_ctx=85, n_batch=N_BATCH)

    def run(prompt, n, sampler=None):
        model.reset()
        return generate(model, prompt, n, sampler or Sampler(0)).tokens
    return run


class Collect:
    """An on_event that keeps the events and says when the last came."""

    def __init__(self):
        self.events, self.done = [], threading.Event()

    def __call__(self, ev):
        self.events.append(ev)
        if ev.finish_reason is not None:
            self.done.set()

    def wait(self):
        assert self.done.wait(900), "the request did not finish"      # a cold numba cache compiles first
        return self

    @property
    def tokens(self):
        return [e.token for e in self.events if e.token is not None]

    @property
    def text(self):
        return "".join(e.text for e in self.events)

    @property
    def last(self):
        return self.events[-1]


def prompts(n, seed, lo=3, hi=40):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, 320, int(rng.integers(lo, hi)))] for _ in range(n)]


def greedy(n):
    return Params(max_tokens=n, temperature=0, ignore_eos=True)


def test_one_request_equals_a_lone_run(engine, lone):
    prompt = prompts(1, SEED)[0]
    c = Collect()
    engine.submit(prompt, greedy(12), c)
    c.wait()
    assert c.tokens == lone(prompt, 12), f"seed {SEED}"
    assert c.last.finish_reason == "length" and c.last.usage == {"prompt_tokens": len(prompt), "completion_tokens": 12}
    assert c.text == engine.tokenizer.decode(c.tokens)


def test_many_requests_at_once_equal_lone_runs(engine, lone):
    """Seven requests of different lengths in three slots (four wait in the queue, join as slots free up)."""
    ps = prompts(7, SEED + 1)
    ns = [5, 17, 9, 3, 12, 20, 1]
    cs = [Collect() for _ in ps]
    for p, n, c in zip(ps, ns, cs):
        engine.submit(p, greedy(n), c)
    got = [c.wait().tokens for c in cs]         # all done before the lone runs: they share the backend (see `lone`)
    assert got == [lone(p, n) for p, n in zip(ps, ns)], f"seed {SEED}"
    assert engine.stats()["slots_busy"] == 0 and engine.stats()["queue_length"] == 0


def test_seeded_sampling_is_reproducible_alone_and_in_company(engine, lone):
    prompt = prompts(1, SEED + 2)[0]
    p = Params(max_tokens=10, temperature=0.9, top_k=20, top_p=0.9, seed=SEED, ignore_eos=True)
    a = Collect()
    engine.submit(prompt, p, a)
    a.wait()
    others = [Collect() for _ in range(2)]
    b = Collect()
    for q, c in zip(prompts(2, SEED + 3), others):
        engine.submit(q, greedy(15), c)
    engine.submit(prompt, p, b)
    b.wait(), [c.wait() for c in others]
    assert a.tokens == b.tokens == lone(prompt, 10, Sampler(0.9, 20, 0.9, SEED)), f"seed {SEED}"


def test_prompt_cache_reads_only_the_rest(engine, lone):
    first, rest = prompts(2, SEED + 4, 20, 30)
    a = Collect()
    engine.submit(first, greedy(4), a)
    a.wait()
    before = engine.stats()["tokens_prompt"]
    b = Collect()
    engine.submit(first + rest, greedy(8), b)
    b.wait()
    assert engine.stats()["tokens_prompt"] - before == len(rest)        # the slot kept `first` (and a's tokens)
    assert b.tokens == lone(first + rest, 8), f"seed {SEED}"


def test_stop_string_ends_the_text_before_it(engine, lone):
    prompt = prompts(1, SEED + 5)[0]
    text = engine.tokenizer.decode(lone(prompt, 16))
    stop = text[len(text) // 2:len(text) // 2 + 3]
    c = Collect()
    engine.submit(prompt, Params(max_tokens=16, temperature=0, stop=["\x00never", stop], ignore_eos=True), c)
    c.wait()
    assert c.last.finish_reason == "stop" and c.text == text[:text.find(stop)]


def test_cancel_frees_the_slot_within_a_step(path):
    eng = Engine(path, "cpu", 2, n_ctx=128, n_parallel=1, n_batch=N_BATCH).start()
    try:
        first = threading.Event()
        c = Collect()
        h = eng.submit(prompts(1, SEED)[0], greedy(10_000), lambda ev: (c(ev), first.set()))
        assert first.wait(60)
        h.cancel()
        d = Collect()
        eng.submit(prompts(1, SEED + 6)[0], greedy(3), d)
        assert d.wait().last.finish_reason == "length"
        assert c.last.finish_reason is None and len(c.tokens) < 50          # dropped, not run to the slot's end
    finally:
        eng.stop()


def test_an_idle_engine_plans_the_generating_steps_ahead(path):
    """warmup: between requests the engine plans every key of BatchModel.decode_keys (a request arriving meanwhile is
    answered), after which generating builds no graph; without warmup nothing is planned ahead."""
    cold = Engine(path, "cpu", 2, n_ctx=600, n_parallel=3, n_batch=N_BATCH).start()
    try:
        assert len(cold.model._steps) == 1 and cold.stats()["graphs_to_plan"] == 0      # the worst case only
    finally:
        cold.stop()
    eng = Engine(path, "cpu", 2, n_ctx=600, n_parallel=3, n_batch=N_BATCH, warmup=True).start()
    try:
        keys = eng.model.decode_keys()
        assert keys == [(b, c) for b in (1, 2, 3) for c in eng.model.kv_classes] and len(eng.model.kv_classes) > 1
        c = Collect()
        eng.submit(prompts(1, SEED)[0], greedy(3), c)
        assert c.wait().last.finish_reason == "length"
        deadline = time.monotonic() + 300
        while eng.stats()["graphs_to_plan"]:
            assert time.monotonic() < deadline, eng.stats()
            time.sleep(0.05)
        assert set(keys) <= set(eng.model._steps)
        before = set(eng.model._steps)
        many = [Collect() for _ in range(3)]
        for prompt, m in zip(prompts(3, SEED + 1, lo=2, hi=4), many):
            eng.submit(prompt, greedy(6), m)
        for m in many:
            assert len(m.wait().tokens) == 6
        assert not (set(eng.model._steps) - before) & set(keys)     # only prompt chunks' keys were new
    finally:
        eng.stop()


def test_top_k_draw_equals_the_samplers_over_all_logits():
    """Request.sample (a partition of the k best) draws what Sampler draws from the whole logits, ties included."""
    rng = np.random.default_rng(SEED)
    for k, temp, top_p in [(40, 0.8, 0.95), (5, 1.5, 1.0), (1, 0.7, 0.9), (0, 0.9, 0.9)]:
        p = Params(temperature=temp, top_k=k, top_p=top_p, seed=SEED)
        req, ref = Request(Handle([1], p, print), None), Sampler(temp, k, top_p, SEED)
        for _ in range(30):
            logits = np.round(rng.normal(size=500) * 2, 1).astype(np.float32)     # many ties
            assert req.sample(logits) == ref(logits), f"seed {SEED}"


def test_device_head_draws_what_the_host_sampler_draws(path):
    """Request.next_token from BatchModel.decode_top's ids and values (the whole logits only where the sampler needs
    them: top_k 0) draws what Request.sample draws from the whole logits, seeded alike: greedy, top-k below and at the
    head's K, top-p."""
    bm = BatchModel(open_llama(path), "cpu", 2, n_ctx=96, n_seq=3, n_batch=16)
    rng = np.random.default_rng(SEED)
    parts = [(s, 0, [int(t) for t in rng.integers(0, 320, n)]) for s, n in enumerate((4, 9, 1))]
    ids, values, logits = bm.decode_top(parts, logits=True)
    for temp, k, top_p in [(0, 40, 0.95), (0.8, 40, 0.95), (1.5, 5, 1.0), (0.7, 1, 0.9), (3.0, 256, 0.99),
                           (0.9, 0, 0.9)]:
        p = Params(temperature=temp, top_k=k, top_p=top_p, seed=SEED)
        dev, host = (Request(Handle([1], p, print), None) for _ in range(2))
        for _ in range(20):
            for j in range(3):
                full = logits[j] if dev.sampler.device_head() is None else None
                assert dev.next_token(ids[j], values[j], full) == host.sample(logits[j]), f"seed {SEED}"
    bad = logits[0].copy()
    bad[7] = np.nan                              # NaN ranks first in the device's head: an error, never a token
    for k in (40, 0):
        req = Request(Handle([1], Params(temperature=0.8, top_k=k, seed=SEED), print), None)
        head = None if req.sampler.device_head() is None else (np.array([7, 3]), np.array([np.nan, 1.0], np.float32))
        with pytest.raises(NonFiniteLogitsError, match="not finite"):
            req.next_token(*(head or (None, None)), bad)


def test_a_sampler_needing_the_logits_beside_greedy_ones(engine, lone):
    """A request sampling the whole vocabulary (top_k 0: its logits cross to the host) in the batches of greedy ones
    (the device's ids): the greedy tokens equal lone runs, the sampled request gets all its tokens."""
    ps = prompts(3, SEED + 7)
    cs = [Collect() for _ in ps]
    engine.submit(ps[0], Params(max_tokens=9, temperature=0.9, top_k=0, seed=SEED, ignore_eos=True), cs[0])
    for p, c in zip(ps[1:], cs[1:]):
        engine.submit(p, greedy(9), c)
    got = [c.wait().tokens for c in cs]
    assert len(got[0]) == 9 and got[1:] == [lone(p, 9) for p in ps[1:]], f"seed {SEED}"


def test_queue_bound_and_bad_input(path):
    eng = Engine(path, "cpu", 2, n_ctx=64, n_parallel=2, max_queue=2)   # not started: requests stay queued
    for _ in range(2):
        eng.submit([1, 2, 3], greedy(1), Collect())
    with pytest.raises(QueueFull):
        eng.submit([1, 2, 3], greedy(1), Collect())
    with pytest.raises(ValueError, match="more than a slot's context of 32"):
        eng.submit(list(range(33)), greedy(1), Collect())
    for bad in ([], [320], [-1]):
        with pytest.raises(ValueError):
            eng.submit(bad, greedy(1), Collect())
    with pytest.raises(ValueError, match="max_tokens"):
        eng.submit([1], Params(max_tokens=-1), Collect())


def test_prompt_chunks_beside_generating_slots_fill_a_bucket_exactly():
    """Engine._takes on slots alone (no model): on the CPU, with generating slots, the prompt chunks end where the
    step's tokens fill a graph bucket (the rest rides along with the next step); without them a chunk takes all the
    room; on CUDA chunks are never cut."""
    from types import SimpleNamespace

    from ggpy.models.llama.batch import buckets
    eng = Engine.__new__(Engine)
    eng.model = SimpleNamespace(n_batch=64, buckets=buckets(64), backend=SimpleNamespace(name="cpu"))
    gen = [SimpleNamespace(todo=[5]) for _ in range(3)]
    prompts = [SimpleNamespace(todo=list(range(40))), SimpleNamespace(todo=list(range(30)))]
    takes = eng._takes(gen + prompts)
    assert [n for _, n in takes] == [1, 1, 1, 40, 21] and takes[3][0] is prompts[0]   # 61 of room: 64 in all
    assert sum(n for _, n in eng._takes(gen + prompts[1:])) == 32                      # 33 -> 32, not 48 padded
    assert [n for _, n in eng._takes(prompts)] == [40, 24]                             # room 64, no generating slot
    assert [n for _, n in eng._takes([SimpleNamespace(todo=list(range(100)))])] == [64]
    assert [n for _, n in eng._takes(gen[:1] + [SimpleNamespace(todo=list(range(2)))])] == [1, 2]   # 3 is a bucket
    for n_gen in range(1, 9):
        for n_prompt in (2, 7, 29, 61, 200):
            got = sum(n for _, n in eng._takes(gen[:1] * n_gen + [SimpleNamespace(todo=list(range(n_prompt)))]))
            assert got in eng.model.buckets and got >= n_gen
    eng.model.backend.name = "cuda:0"                                                # CUDA: padded, never cut
    assert [n for _, n in eng._takes(gen + prompts)] == [1, 1, 1, 40, 21]
    assert [n for _, n in eng._takes(gen + prompts[1:])] == [1, 1, 1, 30]
