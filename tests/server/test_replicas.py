"""ggpy-server --ray on a local Ray cluster (2 CPUs): two CPU replicas of a small random GGUF behind Serve's one
address. The official `openai` client (a completion, a streamed chat) and the API key through the proxy; two streams
at once land on different replicas (each replica's /metrics shows one busy slot); a replica's actor killed while
they run: later requests are all answered and Serve brings the replica back."""
import concurrent.futures
import json
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

for _m in ("fastapi", "uvicorn", "openai", "tokenizers", "ray.serve"):     # pip install -e ".[server,ray,test]"
    pytest.importorskip(_m)

import openai
import ray
from llama_tiny import write_tiny_llama
from ray import serve

from ggpy.server.cli import parser
from ggpy.server.replicas import NAME, deployment

SEED = int(np.random.SeedSequence().entropy % 2**32)
KEY = "sk-test-" + str(SEED)
N_CTX = 2048            # two slots of 1024 tokens a replica: streams that run for a while


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    path = str(write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=SEED, n_layer=1, n_ctx=N_CTX))
    port = free_port()
    args = parser().parse_args(["-m", path, "--ray", "--replicas", "2", "-t", "1", "-c", str(N_CTX), "-np", "2",
                                "--batch-size", "16", "--api-key", KEY, "--port", str(port)])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)     # cli's run(), on a cluster of 2 CPUs
    try:
        serve.start(http_options={"host": args.host, "port": port})
        serve.run(deployment(args, path, N_CTX).options(health_check_period_s=1).bind(), name=NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def get(url: str, key: str | None = KEY) -> tuple:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def running() -> int:
    return serve.status().applications[NAME].deployments[NAME].replica_states.get("RUNNING", 0)


def complete(client, n=4) -> int:
    r = client.completions.create(model="tiny", prompt="the day", max_tokens=n, temperature=0,
                                  extra_body={"ignore_eos": True})
    return r.usage.completion_tokens


def test_the_openai_client_and_the_api_key_through_the_proxy(url, client):
    assert get(url + "/health", key=None) == (200, '{"status":"ok"}')
    status, body = get(url + "/v1/models", key="wrong")
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    assert complete(client) == 4
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=5, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].usage.completion_tokens == 5
    assert chunks[-2].choices[0].finish_reason == "length"


def long_stream(client):
    """A streamed completion filling its slot, once it has started: (its first chunk, the rest as a future)."""
    stream = client.completions.create(model="tiny", prompt="a", max_tokens=N_CTX // 2 - 2, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    it = iter(stream)
    return next(it), it


def finish(it) -> str:
    """'length' when the stream ends normally, else the error it ends with."""
    try:
        return [c.choices[0].finish_reason for c in it][-1]
    except (openai.APIError, ValueError) as e:      # the replica died under it: an error chunk or a cut stream
        return f"{type(e).__name__}: {e}"


def test_a_killed_replica_is_replaced_while_the_other_answers(url, client):
    assert running() == 2, serve.status()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        streams = [long_stream(client) for _ in range(2)]
        status, body = get(url + "/metrics")
        assert status == 200 and "ggpy_slots_busy 1\n" in body, body     # one stream on each replica
        ends = [pool.submit(finish, it) for _, it in streams]
        victim = next(n for n in ray.util.list_named_actors(all_namespaces=True) if "SERVE_REPLICA" in n["name"])
        ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]))
        results = [end.result(timeout=120) for end in ends]
        assert "length" in results, results         # the other replica's stream ran to its end
        assert list(pool.map(lambda _: complete(client), range(6))) == [4] * 6
    deadline = time.monotonic() + 120
    while running() < 2:
        assert time.monotonic() < deadline, serve.status()
        time.sleep(0.5)
    assert complete(client) == 4
