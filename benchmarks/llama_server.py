"""A bounded load generator for an OpenAI-compatible completions server on this machine (ggpy-server, llama-server,
llama-cpp-python's server):

    python benchmarks/llama_server.py [--url http://127.0.0.1:8080] [--clients 1,4,16,64] [--requests 4]
                                      [--prompt 128] [--gen 64] [--timeout 300] [--api-key KEY] [--pid PID] [--text]
                                      [--warm]

For each client count N: N threads, each sending M streamed POST /v1/completions one after another (temperature 0,
ignore_eos and min_tokens --gen for servers without ignore_eos, max_tokens --gen), every prompt its own seeded random --prompt token ids (the prompt cache never
helps; --text sends " the" * prompt instead, for servers that take only text). Each request has --timeout seconds;
one that fails or times out is counted, never retried. Reported per N: requests answered / sent, aggregate
generated tokens/s (completion tokens of all requests over the wall time of the run), time to first token
(the first chunk of a token, its text maybe empty) p50 / p95, requests/s, and with --pid the server process's RSS after the run. The last
line is the whole table as JSON. With --warm each client count first runs once unmeasured on other prompts (a
server that plans or captures per batch shape meets them there; its rate then is the "cold" column), then measured. Traffic goes only
to 127.0.0.1 / localhost.
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

import numpy as np

LOCAL = {"127.0.0.1", "localhost", "::1"}


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


class Target:
    """The server: host, port, path prefix and headers."""

    def __init__(self, url: str, api_key: str | None):
        u = urllib.parse.urlsplit(url)
        if u.hostname not in LOCAL:
            raise SystemExit(f"error: {url}: this benchmark sends traffic only to 127.0.0.1 / localhost")
        self.host, self.port, self.prefix = u.hostname, u.port or 80, u.path.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def complete(self, body: dict, timeout: float) -> tuple:
        """(completion tokens, seconds to the first token's chunk) of one streamed completion; raises on any failure."""
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("POST", self.prefix + "/v1/completions", json.dumps(body), self.headers)
            r = conn.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
            ttft, chunks, usage = None, 0, None
            for raw in r:
                if time.perf_counter() - t0 > timeout:
                    raise TimeoutError(f"over {timeout} s")
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                if "error" in obj:
                    raise RuntimeError(obj["error"])
                usage = obj.get("usage") or usage
                if obj.get("choices") and obj["choices"][0].get("text") is not None:    # a token's chunk: its text may be
                    chunks += 1                                                     # empty (a random model's pieces)
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
            if ttft is None:
                raise RuntimeError("no token came")
            return (usage or {}).get("completion_tokens", chunks), ttft
        finally:
            conn.close()


def run(target: Target, n_clients: int, n_requests: int, args, salt: int = 0) -> dict:
    """N clients x M requests; the row of the table. `salt`: another set of prompts (a pass that warms a server must
    not fill its prompt cache with the measured pass's prompts)."""
    lock, done, ttfts, failures = threading.Lock(), [0], [], []

    def client(c: int):
        for i in range(n_requests):
            seed = ((salt * 1000 + n_clients) * 1000 + c) * 1000 + i
            prompt = " the" * args.prompt if args.text else \
                [int(t) for t in np.random.default_rng(seed).integers(100, args.vocab, args.prompt)]
            body = {"prompt": prompt, "max_tokens": args.gen, "temperature": 0, "ignore_eos": True, "min_tokens": args.gen,
                    "stream": True,
                    "stream_options": {"include_usage": True}}
            try:
                n, ttft = target.complete(body, args.timeout)
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown, never retried
                with lock:
                    failures.append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                done[0] += n
                ttfts.append(ttft)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    q = np.percentile(ttfts, [50, 95]) if ttfts else [float("nan")] * 2
    return {"clients": n_clients, "answered": len(ttfts), "sent": n_clients * n_requests, "wall_s": round(wall, 3),
            "gen_tok_s": round(done[0] / wall, 2), "ttft_p50_s": round(float(q[0]), 4),
            "ttft_p95_s": round(float(q[1]), 4), "req_s": round(len(ttfts) / wall, 3),
            "rss_mib": rss_mib(args.pid), "failures": failures[:3]}


def load_arguments(p: argparse.ArgumentParser):
    """The load's arguments (run() reads them), shared with serve_replicas.py."""
    p.add_argument("--requests", type=int, default=4, help="requests per client (M)")
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    p.add_argument("--gen", type=int, default=64, help="max_tokens of each request")
    p.add_argument("--timeout", type=float, default=300, help="seconds per request")
    p.add_argument("--vocab", type=int, default=32000, help="prompt token ids are drawn from [100, VOCAB)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", default="1,4,16,64", help="client counts, comma-separated")
    load_arguments(p)
    p.add_argument("--text", action="store_true", help="send ' the' * PROMPT as text instead of token ids")
    p.add_argument("--api-key")
    p.add_argument("--pid", type=int, help="the server's process id: its RSS after each run")
    p.add_argument("--warmup", type=int, default=1, help="requests sent alone first, not counted")
    p.add_argument("--warm", action="store_true", help="run each client count once unmeasured before measuring it")
    args = p.parse_args(argv)
    target = Target(args.url, args.api_key)
    if args.warmup:
        run(target, 1, args.warmup, args, salt=2)
    rows = []
    print(f"{'clients':>7} {'answered':>9} {'gen tok/s':>10} {'TTFT p50':>9} {'TTFT p95':>9} {'req/s':>7} "
          f"{'RSS MiB':>8}{' cold tok/s' if args.warm else ''}  ({args.url}, prompt {args.prompt}, gen {args.gen}, {args.requests} requests a client)")
    for n in (int(x) for x in args.clients.split(",")):
        cold = run(target, n, args.requests, args, salt=1) if args.warm else None
        row = run(target, n, args.requests, args)
        if cold is not None:
            row["cold_gen_tok_s"] = cold["gen_tok_s"]
        rows.append(row)
        rss = "-" if row["rss_mib"] is None else f"{row['rss_mib']:.0f}"
        cold_col = "" if cold is None else f" {cold['gen_tok_s']:10.1f}"
        print(f"{n:7d} {row['answered']:4d}/{row['sent']:<4d} {row['gen_tok_s']:10.1f} {row['ttft_p50_s']:9.3f} "
              f"{row['ttft_p95_s']:9.3f} {row['req_s']:7.2f} {rss:>8}{cold_col}", flush=True)
        for f in row["failures"]:
            print(f"        failed: {f}", file=sys.stderr)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
