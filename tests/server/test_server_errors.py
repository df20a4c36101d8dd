"""ggpy-server's answers to bad requests and faults, as raw HTTP (status, headers, body as they come): every one a
4xx with an OpenAI error body {"error": {"message", "type"}} in JSON, never a 500 or a traceback; the API key
(401 without it, /health open); a queue full answered 503; clients that go away mid-stream or while queued free
their slots (the engine stops generating for them)."""
import json
import time

import numpy as np
import pytest

for _m in ("fastapi", "uvicorn", "openai", "tokenizers"):     # the server and test extras: pip install -e ".[server,test]"
    pytest.importorskip(_m)

import openai
from llama_tiny import write_tiny_llama
from server_helpers import Running, open_stream, read_until

from ggpy.server.engine import Engine

SEED = int(np.random.SeedSequence().entropy % 2**32)
KEY = "sk-errors-" + str(SEED)
AUTH = {"Authorization": f"Bearer {KEY}"}
N_SLOT = 512            # a slot's context: a request that runs to its end generates ~500 tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=2, n_ctx=2048)
    srv = Running(Engine(path, "cpu", 2, n_ctx=2 * N_SLOT, n_parallel=2, n_batch=16, max_queue=2), api_key=KEY)
    srv.wait_ready()
    yield srv
    srv.stop()


def check_error(answer, status):
    code, headers, body = answer
    assert code == status, answer
    assert headers["content-type"].startswith("application/json"), answer
    assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["type"], str), answer
    assert "Traceback" not in json.dumps(body)
    return body["error"]


BAD_BODIES = [
    ("/v1/completions", b'{"prompt": "the day", "max_tokens": ', "not valid JSON"),
    ("/v1/completions", b"\xff\xfe", "not valid JSON"),
    ("/v1/completions", b"[1, 2]", "JSON object"),
    ("/v1/completions", {"max_tokens": 3}, "'prompt' is required"),
    ("/v1/completions", {"prompt": 5}, "'prompt' must be"),
    ("/v1/completions", {"prompt": ["a", "b"]}, "one prompt per request"),
    ("/v1/completions", {"prompt": "the", "max_tokens": -1}, "'max_tokens'"),
    ("/v1/completions", {"prompt": "the", "max_tokens": "ten"}, "'max_tokens' must be an integer"),
    ("/v1/completions", {"prompt": "the", "max_tokens": 2.5}, "'max_tokens' must be an integer"),
    ("/v1/completions", {"prompt": "the", "max_tokens": True}, "'max_tokens' must be an integer"),
    ("/v1/completions", {"prompt": "the", "temperature": "hot"}, "'temperature' must be a number"),
    ("/v1/completions", {"prompt": "the", "temperature": -1}, "'temperature' must lie in"),
    ("/v1/completions", {"prompt": "the", "top_p": 1.5}, "'top_p' must lie in"),
    ("/v1/completions", {"prompt": "the", "seed": "x"}, "'seed' must be an integer"),
    ("/v1/completions", {"prompt": "the", "temperature": 2.5}, "'temperature' must lie in [0, 2]"),
    ("/v1/completions", {"prompt": "the", "presence_penalty": 3}, "'presence_penalty' must lie in [-2, 2]"),
    ("/v1/completions", {"prompt": "the", "frequency_penalty": -2.5}, "'frequency_penalty' must lie in [-2, 2]"),
    ("/v1/completions", {"prompt": "the", "logprobs": 2}, "'logprobs' is not served"),
    ("/v1/completions", {"prompt": "the", "echo": True}, "'echo' is not served"),
    ("/v1/completions", {"prompt": "the", "best_of": 3}, "'best_of' is not served"),
    ("/v1/completions", {"prompt": "the", "suffix": "end"}, "'suffix' is not served"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "'logprobs' is not"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "'top_logprobs'"),
    ("/v1/completions", {"prompt": "the", "stop": 5}, "'stop' must be"),
    ("/v1/completions", {"prompt": "the", "stream": "yes"}, "'stream' must be true or false"),
    ("/v1/completions", {"prompt": "the", "n": 0}, "'n' must lie in [1, 128]"),
    ("/v1/completions", {"prompt": "the", "n": 129}, "'n' must lie in [1, 128]"),
    ("/v1/completions", {"prompt": [7] * (N_SLOT + 1)}, f"more than a slot's context of {N_SLOT}"),
    ("/v1/completions", {"prompt": "the day " * N_SLOT}, f"more than a slot's context of {N_SLOT}"),
    ("/v1/completions", {"prompt": [1, 320]}, "token ids must lie in"),
    ("/v1/chat/completions", {"prompt": "the day"}, "'messages' is required"),
    ("/v1/chat/completions", {"messages": []}, "'messages' must be a non-empty list"),
    ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "string 'role'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "content must be a string"),
    ("/v1/chat/completions", {"messages": [{"role": "narrator", "content": "hi"}]}, "role must be one of"),
    ("/v1/completions", {"prompt": "the", "stream_options": {"include_usage": True}}, "'stream_options' is only"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -2}, "'max_tokens'"),
    ("/tokenize", {"text": "the"}, "needs {\"content\": string}"),
    ("/detokenize", {"tokens": [1, -1]}, "needs {\"tokens\""),
    ("/detokenize", {"tokens": "1 2"}, "needs {\"tokens\""),
]


@pytest.mark.parametrize("path,body,message", BAD_BODIES, ids=[f"{p}:{m}" for p, _, m in BAD_BODIES])
def test_bad_request_is_a_400_with_an_openai_error(server, path, body, message):
    err = check_error(server.request("POST", path, body, AUTH), 400)
    assert message in err["message"] and err["type"] == "invalid_request_error"
    field = message.split("'")[1] if message.startswith("'") else None     # the field at fault, where one is
    assert "param" in err and (field is None or err["param"] == field), err


def test_defaults_and_any_seed_are_served(server):
    """What clients send by default (logprobs false, n 1, zero penalties, echo false) and a negative seed (OpenAI
    takes any integer) are answered; the same seed twice gives the same text."""
    body = {"prompt": "the day", "max_tokens": 4, "temperature": 1.0, "seed": -7, "logprobs": None, "echo": False,
            "n": 1, "presence_penalty": 0, "frequency_penalty": 0.5, "best_of": 1}
    answers = [server.request("POST", "/v1/completions", body, AUTH) for _ in range(2)]
    assert all(a[0] == 200 for a in answers), answers
    assert answers[0][2]["choices"][0]["text"] == answers[1][2]["choices"][0]["text"]


def test_model_by_id(server):
    status, _, entry = server.request("GET", "/v1/models", None, AUTH)
    name = entry["data"][0]["id"]
    status, _, model = server.request("GET", f"/v1/models/{name}", None, AUTH)
    assert status == 200 and model["id"] == name and model["object"] == "model", model
    err = check_error(server.request("GET", "/v1/models/not-" + name, None, AUTH), 404)
    assert err["param"] == "model" and name in err["message"]


def test_unknown_path_and_method(server):
    assert check_error(server.request("GET", "/v1/nothing", headers=AUTH), 404)["type"] == "not_found_error"
    assert "/v1/nothing" in check_error(server.request("POST", "/v1/nothing", {}, AUTH), 404)["message"]
    check_error(server.request("GET", "/v1/completions", headers=AUTH), 405)


def test_api_key(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/metrics"),
                             ("GET", "/nowhere")):
            assert check_error(server.request(method, path, {"prompt": "the"}, headers), 401)["type"] == \
                "authentication_error"
    assert server.request("GET", "/health")[:3:2] == (200, {"status": "ok"})
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=600)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model="tiny", prompt="the", max_tokens=-1)
    assert client.completions.create(model="tiny", prompt="the", max_tokens=2).usage.completion_tokens <= 2


def test_full_queue_is_503_and_clients_that_go_away_free_their_slots(server):
    """Two streams fill both slots, two more wait (the bound), a fifth request is refused 503; then every client
    hangs up: both slots free up within a few steps and the engine generates far fewer tokens than the four
    requests would have (each would run to its slot's end, ~500 tokens)."""
    eng = server.engine
    before = eng.stats()["tokens_generated"]
    long = {"prompt": "the day was", "max_tokens": 100_000, "temperature": 0, "ignore_eos": True}
    running = [open_stream(server.port, long, AUTH) for _ in range(2)]
    for s in running:
        read_until(s, b"data: {")                          # generating in a slot
    waiting = [open_stream(server.port, long, AUTH) for _ in range(2)]
    for s in waiting:
        assert read_until(s, b"\r\n\r\n").startswith(b"HTTP/1.1 200")    # queued
    assert eng.stats()["queue_length"] == 2
    err = check_error(server.request("POST", "/v1/completions", long, AUTH), 503)
    assert err["type"] == "unavailable_error" and "busy" in err["message"]
    for s in running + waiting:
        s.close()
    deadline = time.monotonic() + 30
    while eng.stats()["slots_busy"] or eng.stats()["queue_length"]:
        assert time.monotonic() < deadline, eng.stats()
        time.sleep(0.01)
    assert eng.stats()["tokens_generated"] - before < N_SLOT, eng.stats()
    status, _, body = server.request("POST", "/v1/completions", {**long, "max_tokens": 3}, AUTH)   # served again
    assert status == 200 and body["usage"]["completion_tokens"] == 3


def test_more_choices_than_the_engine_holds_is_503_and_queues_none(server):
    """n = 5 where two slots and two places wait: 503, the choices queued before the refusal cancelled (the engine
    idle again at once); n = 2 is then answered."""
    eng = server.engine
    body = {"prompt": "the day was", "max_tokens": 100_000, "temperature": 0, "ignore_eos": True, "n": 5}
    err = check_error(server.request("POST", "/v1/completions", body, AUTH), 503)
    assert "busy" in err["message"]
    deadline = time.monotonic() + 30
    while eng.stats()["slots_busy"] or eng.stats()["queue_length"]:
        assert time.monotonic() < deadline, eng.stats()
        time.sleep(0.01)
    status, _, answer = server.request("POST", "/v1/completions", {**body, "n": 2, "max_tokens": 3}, AUTH)
    assert status == 200 and [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["usage"]["completion_tokens"] == 6
