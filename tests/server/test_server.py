"""ggpy-server through the official `openai` client, on a small random GGUF (CPU), against a real server on
127.0.0.1: completions and chat completions, streamed and not (the deltas concatenate to the whole text), at
temperature 0 equal to a lone greedy run through GraphModel (as ggpy-llama --temp 0) and equal whether sent one by
one or all at once; the chat template's prompt; seeded sampling; stop strings; /v1/models, /tokenize against the
Hugging Face tokenizer the file was made from, /detokenize, /metrics; 503 while loading."""
import concurrent.futures
import re
import time

import numpy as np
import pytest

for _m in ("fastapi", "uvicorn", "openai", "tokenizers"):     # the server and test extras: pip install -e ".[server,test]"
    pytest.importorskip(_m)

import openai
from gguf import GGMLQuantizationType as gguf_types
from llama_tiny import DEFAULT_TYPES, tiny_tokenizer, write_tiny_llama
from server_helpers import Running

from ggpy.models.llama.chat import render_chat
from ggpy.models.llama.generate import generate
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import GraphModel
from ggpy.models.llama.sampling import Sampler
from ggpy.server.engine import Engine

SEED = int(np.random.SeedSequence().entropy % 2**32)
KEY = "sk-test-" + str(SEED)
N_BATCH = 16            # the engine's chunks and the lone run's: the same mat-mul kernels (see test_engine.py)
N_SLOT = 128            # a slot's context


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """F32 weights, as test_engine.py's: a quantized product rounds the activations to 8 bits in kernels chosen by
    the column count, so the batches concurrent requests share (their prompt chunks cut where steps fill a bucket)
    could turn a greedy near-tie against the one-by-one run."""
    f32 = dict.fromkeys(DEFAULT_TYPES, gguf_types.F32)
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=2, n_ctx=1024,
                            types=f32)


@pytest.fixture(scope="module")
def server(path):
    eng = Engine(path, "cpu", 2, n_ctx=3 * N_SLOT, n_parallel=3, n_batch=N_BATCH, max_queue=16)   # 10 at once: room for all
    srv = Running(eng, api_key=KEY)
    srv.wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def lone(path):
    model = GraphModel(open_llama(path), "cpu", 2, n_ctx=N_SLOT, n_batch=N_BATCH)

    def run(prompt, n):
        model.reset()
        return generate(model, prompt, n, Sampler(0)).tokens
    return run


def prompt_ids(rng, lo=3, hi=30):
    return [int(t) for t in rng.integers(3, 320, int(rng.integers(lo, hi)))]


def greedy(**kw):
    return {"temperature": 0, "extra_body": {"ignore_eos": True}, **kw}


def test_completion_equals_a_lone_greedy_run(client, server, lone):
    prompt = prompt_ids(np.random.default_rng(SEED))
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, **greedy())
    assert r.choices[0].text == server.engine.tokenizer.decode(lone(prompt, 12)), f"seed {SEED}"
    assert r.choices[0].finish_reason == "length" and r.object == "text_completion" and r.model == "tiny"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(prompt), 12,
                                                                                         len(prompt) + 12)


def test_stream_deltas_concatenate_to_the_whole_text(client):
    rng = np.random.default_rng(SEED + 1)
    for prompt in (prompt_ids(rng), "the water of the day was hot"):
        whole = client.completions.create(model="tiny", prompt=prompt, max_tokens=20, **greedy())
        chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=20, stream=True,
                                                stream_options={"include_usage": True}, **greedy()))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].usage.completion_tokens == 20 == whole.usage.completion_tokens
        assert all("usage" in c.model_fields_set and c.usage is None for c in chunks[:-1]), "usage: null before the last"


def test_concurrent_requests_equal_sequential_ones(client):
    """Ten requests of different lengths at once in three slots (seven wait) answer as one by one."""
    rng = np.random.default_rng(SEED + 2)
    jobs = [(prompt_ids(rng, 3, 60), int(n)) for n in rng.integers(1, 25, 10)]

    def ask(job):
        r = client.completions.create(model="tiny", prompt=job[0], max_tokens=job[1], **greedy())
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens

    one_by_one = [ask(j) for j in jobs]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        at_once = list(pool.map(ask, jobs))
    assert at_once == one_by_one, f"seed {SEED}"
    assert [n for _, _, n in at_once] == [n for _, n in jobs]


def test_chat_completion_renders_the_template(client, server):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the hot water of the day"}]
    hf = tiny_tokenizer()
    text = render_chat(server.engine.tokenizer.chat_template, messages, hf.id_to_token(1), hf.id_to_token(2))
    ids = hf.encode(text, add_special_tokens=False).ids
    ids = ids if text.startswith(hf.id_to_token(1)) else [1] + ids      # BOS (id 1) unless the template wrote it
    want = client.completions.create(model="tiny", prompt=ids, max_tokens=15, **greedy())
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=15, **greedy())
    assert r.choices[0].message.content == want.choices[0].text and r.choices[0].message.role == "assistant"
    assert r.object == "chat.completion" and r.usage.prompt_tokens == len(ids)
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=15, stream=True,
                                                 **greedy()))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want.choices[0].text


def test_seeded_sampling_is_reproducible(client):
    kw = {"model": "tiny", "prompt": "the day was", "max_tokens": 16, "temperature": 1.0,
          "extra_body": {"ignore_eos": True, "top_k": 0}}
    a, b = (client.completions.create(seed=SEED, **kw).choices[0].text for _ in range(2))
    others = {client.completions.create(seed=SEED + i, **kw).choices[0].text for i in range(1, 4)}
    assert a == b and others != {a}, f"seed {SEED}"


def test_n_choices_are_the_seeded_requests_one_by_one(client):
    """n = 3 seeded choices: choice i is the request seeded seed + i alone, whole and streamed (chunks interleaved,
    each choice finished once); the usage counts the prompt once and every choice's tokens."""
    kw = {"model": "tiny", "prompt": "the day was", "max_tokens": 10, "temperature": 1.0,
          "extra_body": {"ignore_eos": True, "top_k": 0}}
    alone = [client.completions.create(seed=SEED + i, **kw).choices[0].text for i in range(3)]
    r = client.completions.create(seed=SEED, n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2] and [c.text for c in r.choices] == alone, f"seed {SEED}"
    assert r.usage.completion_tokens == 30 and r.usage.prompt_tokens == client.completions.create(
        seed=SEED, **kw).usage.prompt_tokens
    chunks = list(client.completions.create(seed=SEED, n=3, stream=True, stream_options={"include_usage": True}, **kw))
    texts = ["".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in range(3)]
    ends = [c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert texts == alone and sorted(ends) == [0, 1, 2] and chunks[-1].usage.completion_tokens == 30
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "the day"}], n=2,
                                          max_tokens=6, **greedy())
    assert [c.index for c in chat.choices] == [0, 1] and chat.choices[0].message.content == chat.choices[1].message.content
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "the day"}], n=2,
                                                 max_tokens=6, stream=True, **greedy()))
    assert sorted(c.choices[0].index for c in chunks if c.choices[0].delta.role == "assistant") == [0, 1]
    assert ["".join(c.choices[0].delta.content or "" for c in chunks if c.choices[0].index == i)
            for i in range(2)] == [chat.choices[0].message.content] * 2


def test_stop_strings_end_the_text(client):
    prompt = prompt_ids(np.random.default_rng(SEED + 3))
    text = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, **greedy()).choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    for stops in (stop, ["\x01never", stop]):
        r = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, stop=stops, **greedy())
        assert r.choices[0].text == text[:text.find(stop)] and r.choices[0].finish_reason == "stop"
        s = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, stop=stops, stream=True, **greedy())
        assert "".join(c.choices[0].text for c in s) == r.choices[0].text


def test_models_tokenize_detokenize(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    text = "the café of 2024 was hot 🙂"
    auth = {"Authorization": f"Bearer {KEY}"}
    status, _, body = server.request("POST", "/tokenize", {"content": text}, auth)
    assert status == 200 and body["tokens"] == tiny_tokenizer().encode(text, add_special_tokens=False).ids
    status, _, back = server.request("POST", "/detokenize", {"tokens": body["tokens"]}, auth)
    assert status == 200 and back == {"content": text}
    assert server.request("POST", "/tokenize", {"content": text, "add_special": True}, auth)[2]["tokens"][0] == 1


def test_metrics_count_requests_and_tokens(client, server):
    auth = {"Authorization": f"Bearer {KEY}"}

    def metrics():
        status, headers, text = server.request("GET", "/metrics", headers=auth)
        assert status == 200 and headers["content-type"].startswith("text/plain")
        return {m[1]: float(m[2]) for m in re.finditer(r"^(ggpy_\w+(?:\{[^}]*\})?) (\S+)$", text, re.M)} | \
            {"_text": text}

    before = metrics()
    client.completions.create(model="tiny", prompt="the day", max_tokens=7, **greedy())
    after = metrics()
    assert after["ggpy_requests_total"] == before["ggpy_requests_total"] + 1
    assert after["ggpy_tokens_generated_total"] == before["ggpy_tokens_generated_total"] + 7
    assert after["ggpy_slots_total"] == 3 and after["ggpy_slots_busy"] == 0 and after["ggpy_queue_length"] == 0
    assert after['ggpy_http_responses_total{code="200"}'] >= before['ggpy_http_responses_total{code="200"}'] + 2
    assert "# TYPE ggpy_tokens_generated_total counter" in after["_text"]


def test_health_is_503_while_loading(path):
    eng = Engine(path, "cpu", 2, n_ctx=64, n_parallel=1, n_batch=N_BATCH)
    gate, load = __import__("threading").Event(), eng.start
    eng.start = lambda: (gate.wait(60), load())[1]
    srv = Running(eng)
    try:
        for p in ("/health", "/v1/models"):
            status, _, body = srv.request("GET", p)
            assert status == 503 and body["error"]["type"] == "unavailable_error"
        gate.set()
        t0 = time.monotonic()
        srv.wait_ready(120)
        assert srv.request("GET", "/health")[1:] and srv.request("GET", "/health")[2] == {"status": "ok"}
        assert time.monotonic() - t0 < 120
    finally:
        gate.set()
        srv.stop()
