"""A benchmarked runtime in a spawned process of its own, driven over a pipe, so that the thread pools of
different libraries never share a process (they spin against each other on a small machine).

The child runs `target(conn, *args)`: it answers ("ok", value) once started, then one answer per request
until it receives None; ("error", message) reports a failure."""
from __future__ import annotations

import contextlib
import multiprocessing
import os


@contextlib.contextmanager
def environ(**values):
    """Temporarily set (or, for None, unset) environment variables; spawned workers inherit them."""
    saved = {k: os.environ.get(k) for k in values}
    _set_environ(values)
    try:
        yield
    finally:
        _set_environ(saved)


def _set_environ(values: dict):
    """Set os.environ[k] = v, or remove k where v is None."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Worker:
    """`target(conn, *args)` in a spawned process; `started` is its answer to starting."""

    def __init__(self, label: str, target, args: tuple, env: dict | None = None):
        ctx = multiprocessing.get_context("spawn")
        self.label = label
        self.conn, child = ctx.Pipe()
        with environ(**(env or {})):
            self.process = ctx.Process(target=target, args=(child, *args), daemon=True)
            self.process.start()
        child.close()
        self.started = self.call()

    def call(self, *msg):
        """Send a request (none for the start-up answer) and return its result; raises on a worker error."""
        if msg:
            self.conn.send(msg)
        try:
            status, value = self.conn.recv()
        except EOFError:
            status, value = "error", f"worker process exited (code {self.process.exitcode})"
        if status != "ok":
            raise RuntimeError(f"{self.label}: {value}")
        return value

    def close(self):
        if self.process.is_alive():
            self.conn.send(None)
        self.process.join(timeout=10)
