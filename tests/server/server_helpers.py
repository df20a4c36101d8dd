"""A ggpy-server on 127.0.0.1 in this process (uvicorn in a thread, on a port the OS picks), and raw HTTP requests
to it (http.client: the status, headers and body as they come, whatever the openai client would make of them)."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import uvicorn

from ggpy.server.app import create_app


class Running:
    """A server on `engine` (create_app's other arguments in `kw`): `url`, `port`, `stop()`."""

    def __init__(self, engine, **kw):
        self.engine = engine
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(engine, **kw), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 120):
        """(status, headers, parsed JSON or text) of one request; `body` a dict/list is sent as JSON, bytes raw."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        raw = r.read().decode()
        conn.close()
        is_json = r.getheader("content-type", "").startswith("application/json")
        return r.status, dict(r.getheaders()), json.loads(raw) if is_json else raw

    def wait_ready(self, timeout: float = 300):
        deadline = time.monotonic() + timeout
        while self.request("GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "the server did not load"
            time.sleep(0.05)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(60)


def open_stream(port: int, body: dict, headers: dict) -> socket.socket:
    """A raw socket that has sent a streamed POST /v1/completions and read the response's status line."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps({**body, "stream": True}).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "127.0.0.1", "Content-Type": "application/json",
                                                 "Content-Length": len(data), **headers}.items())
    s.sendall(f"POST /v1/completions HTTP/1.1\r\n{head}\r\n".encode() + data)
    return s


def read_until(s: socket.socket, marker: bytes, got: bytes = b"") -> bytes:
    while marker not in got:
        block = s.recv(65536)
        assert block, f"the connection closed before {marker!r}: {got!r}"
        got += block
    return got
