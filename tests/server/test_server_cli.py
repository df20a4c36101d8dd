"""`python -m examples.llama.server` (ggpy-server) as a process: it binds 127.0.0.1, answers /health, serves a
completion to the openai client and stops cleanly on SIGINT or SIGTERM; a missing model file or a bad argument ends it with
one error line (exit status 1, 2)."""
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

for _m in ("fastapi", "uvicorn", "openai", "tokenizers"):     # the server and test extras: pip install -e ".[server,test]"
    pytest.importorskip(_m)

import openai
from llama_tiny import write_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
SEED = int(np.random.SeedSequence().entropy % 2**32)


def serve(*args):
    return subprocess.Popen([sys.executable, "-m", "examples.llama.server", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serves_then_stops_on_a_signal(tmp_path, stop):
    path = write_tiny_llama(tmp_path / "tiny.gguf", seed=SEED, n_layer=1)
    port = free_port()
    proc = serve("-m", str(path), "--port", str(port), "-t", "2", "-c", "128", "-np", "2", "--batch-size", "16")
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):       # not bound yet, or 503 while loading
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
        r = client.completions.create(model="tiny", prompt="the day", max_tokens=4, temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4 and r.model == "tiny"
    finally:
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"http://127.0.0.1:{port}" in err and "2 slots of 64 tokens" in err


@pytest.mark.parametrize("args,status,message", [
    (["-m", "/nonexistent/model.gguf"], 1, "error: "),
    (["-np", "0"], 2, "argument -np/--parallel"),
    (["--port", "70000"], 2, "argument --port"),
    (["-b", "tpu"], 2, "argument -b/--backend"),
])
def test_bad_arguments_end_with_one_error_line(args, status, message):
    proc = serve(*args)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status and message in err and "Traceback" not in err, err
