"""Text generation on the CPU: ggpy's llama graph vs llama.cpp (llama-cpp-python) on the same GGUF, side by side.

    python benchmarks/llama_cpu.py [-m MODEL.gguf] [-t 1,2] [--prompt 512] [--gen 128] [--rounds 3]

Without -m, SmolLM2-135M-Instruct Q4_1 (fetched once into ~/.cache/ggpy). For each thread count, both runtimes
live in worker processes of their own (their thread pools never share a process) with a context of prompt + gen
tokens and prompts read 512 tokens at a time. A round, per runtime in rotating order after a short pause: forget
the cache, read the seeded random prompt (prompt processing: only the last token's logits are kept, as llama.cpp
does), then read `gen` seeded random tokens one at a time (generation); the same token ids for both. A first round
is shown apart (ggpy's includes building and planning its two graphs, the prompt's and the single token's, which
later rounds replay); the table gives tokens/s at the median over the rounds after it and ggpy's over llama.cpp's. Memory: each runtime's weights,
KV cache (both F16) and compute buffers (ggpy: both planned lanes; llama.cpp: as its log reports them), and each
process's peak RSS. Both with flash attention (ggpy's default `-fa auto`; llama.cpp's flash_attn=True), the prompt
length is the context depth generation runs at.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import re
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from process_worker import Worker  # noqa: E402 - after the path is set

PAUSE_S = 0.2          # workers of the previous runtime stop spinning
N_BATCH = 512


def token_ids(n_vocab: int, n: int, seed: int) -> list:
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, n)]


class GgpyRuntime:
    """ggpy.models.llama's GraphModel on the CPU backend."""

    def __init__(self, opts, threads: int):
        import numba

        from ggpy.models.llama.gguf_file import open_llama
        from ggpy.models.llama.runner import GraphModel
        self.model = GraphModel(open_llama(opts.model), "cpu", threads, opts.prompt + opts.gen, N_BATCH)
        self.n_vocab = self.model.hp.n_vocab
        self.version = f"numpy {np.__version__}, numba {numba.__version__}"

    def reset(self):
        self.model.reset()

    def prompt(self, ids):
        self.model.eval(ids, all_logits=False)

    def token(self, t):
        self.model.eval([t])

    def info(self) -> dict:
        s = self.model.stats
        return {"version": self.version, "memory": self.model.nbytes,
                "planning": f"{s.graphs_built} graphs built in {s.build_s * 1e3:.0f} ms, planned and bound in "
                            f"{s.plan_s * 1e3:.0f} ms"}


class LlamaCppRuntime:
    """llama_cpp.Llama on the same file; its buffer sizes are read from its log."""

    def __init__(self, opts, threads: int):
        import llama_cpp
        self.log = []

        @llama_cpp.llama_log_callback
        def collect(level, text, user_data):
            self.log.append(text.decode(errors="replace"))
        self._collect = collect             # the C library keeps the pointer: keep the callback alive
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        lowlevel = llama_cpp.llama_cpp
        default = lowlevel.llama_model_default_params

        def params():       # ggml's extra CPU buffer types (AMX) segfault on this project's VM: see tests/models/llama_cpp_ref.py
            p = default()
            p.use_extra_bufts = False
            return p
        lowlevel.llama_model_default_params = params
        try:
            self.llm = llama_cpp.Llama(model_path=opts.model, n_ctx=opts.prompt + opts.gen, n_batch=N_BATCH,
                                       n_ubatch=N_BATCH, n_threads=threads, n_threads_batch=threads, flash_attn=True,
                                       verbose=False)
        finally:
            lowlevel.llama_model_default_params = default
        self.n_vocab = self.llm.n_vocab()
        self.version = f"llama-cpp-python {llama_cpp.__version__}"

    def reset(self):
        self.llm.reset()

    def prompt(self, ids):
        self.llm.eval(ids)

    def token(self, t):
        self.llm.eval([t])

    def info(self) -> dict:
        sizes = {}
        for kind, mib in re.findall(r"(model|KV|compute|output) buffer size\s*=\s*([\d.]+) MiB", "".join(self.log)):
            sizes[kind] = sizes.get(kind, 0) + float(mib) * 2**20
        return {"version": self.version, "memory": {"weights": sizes.get("model", 0), "kv_cache": sizes.get("KV", 0),
                                                    "compute": sizes.get("compute", 0) + sizes.get("output", 0)}}


RUNTIMES = {"ggpy": GgpyRuntime, "llama.cpp": LlamaCppRuntime}


def _round(runtime, prompt: list, gen: list) -> tuple:
    """(prompt seconds, generation seconds) of one round."""
    runtime.reset()
    t0 = time.perf_counter()
    runtime.prompt(prompt)
    t1 = time.perf_counter()
    for t in gen:
        runtime.token(t)
    return t1 - t0, time.perf_counter() - t1


def worker(conn, kind: str, opts, threads: int):
    """Build runtime `kind`, answer its vocabulary size, then ("round", prompt, gen) / ("info",) until sent None."""
    try:
        runtime = RUNTIMES[kind](opts, threads)
        conn.send(("ok", runtime.n_vocab))
        while (msg := conn.recv()) is not None:
            if msg[0] == "round":
                conn.send(("ok", _round(runtime, msg[1], msg[2])))
            else:
                info = runtime.info()
                info["max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                conn.send(("ok", info))
    except Exception as e:  # noqa: BLE001 - the parent reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))


def measure(opts, threads: int) -> tuple:
    """({runtime: [(prompt_s, gen_s) of the first round, then of each timed one]}, {runtime: info}) at `threads`
    threads."""
    workers = [Worker(kind, worker, (kind, opts, threads)) for kind in RUNTIMES]
    try:
        n_vocab = workers[0].started
        prompt = token_ids(n_vocab, opts.prompt, 1)
        gen = token_ids(n_vocab, opts.gen, 2)
        times = {w.label: [] for w in workers}
        for r in range(opts.rounds + 1):
            for w in workers[r % len(workers):] + workers[:r % len(workers)]:
                time.sleep(PAUSE_S)
                times[w.label].append(w.call("round", prompt, gen))
            print(f"  t={threads} round {r}/{opts.rounds}{' (first)' if r == 0 else ''}: " + ", ".join(
                f"{k} pp {opts.prompt / v[-1][0]:.1f} tg {opts.gen / v[-1][1]:.1f} tok/s" for k, v in times.items()))
        return times, {w.label: w.call("info") for w in workers}
    finally:
        for w in workers:
            w.close()


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def print_results(opts, results: dict):
    print(f"\n| threads | runtime | prompt tok/s (pp{opts.prompt}) | generation tok/s (tg{opts.gen}) | "
          "pp / llama.cpp | tg / llama.cpp | first round pp / tg tok/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for threads, (times, _) in results.items():
        rates = {k: (opts.prompt / np.median([p for p, _ in v[1:]]), opts.gen / np.median([g for _, g in v[1:]]))
                 for k, v in times.items()}
        base = rates["llama.cpp"]
        for k, (pp, tg) in rates.items():
            first = times[k][0]
            print(f"| {threads} | {k} | {pp:.1f} | {tg:.1f} | {pp / base[0]:.2f} | {tg / base[1]:.2f} | "
                  f"{opts.prompt / first[0]:.1f} / {opts.gen / first[1]:.1f} |")
    print("\n| threads | runtime | weights MiB | KV cache MiB | compute MiB | sum MiB | peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for threads, (_, infos) in results.items():
        for k, info in infos.items():
            m = info["memory"]
            print(f"| {threads} | {k} | {_mib(m['weights'])} | {_mib(m['kv_cache'])} | {_mib(m['compute'])} | "
                  f"{_mib(sum(m.values()))} | {_mib(info['max_rss'])} |")
    for threads, (_, infos) in results.items():
        for k, info in infos.items():
            if "planning" in info:
                print(f"{k} at {threads} threads: {info['planning']} (over all rounds)")
    print("versions: " + ", ".join(sorted({i["version"] for _, infos in results.values() for i in infos.values()})))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", help="GGUF file (default: SmolLM2-135M-Instruct Q4_1, fetched once)")
    p.add_argument("-t", "--threads", default="1,2", help="comma-separated thread counts (1,2)")
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (512)")
    p.add_argument("--gen", type=int, default=128, help="generated tokens (128)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the first (3)")
    opts = p.parse_args(argv)
    if opts.model is None:
        from ggpy.models.llama.fetch import default_model
        opts.model = str(default_model())
    print(f"{opts.model}: pp{opts.prompt} + tg{opts.gen}, {opts.rounds} rounds; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    results = {int(t): measure(opts, int(t)) for t in opts.threads.split(",")}
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print_results(opts, results)


if __name__ == "__main__":
    main()
