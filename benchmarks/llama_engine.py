"""ggpy-server's engine under load without HTTP (issue 30's scaling): C clients, each sending R requests of a
--prompt-token random prompt and --gen generated tokens (temperature 0, ignore_eos) through
ggpy.server.engine.Engine; a warm-up round (its graphs planned), then a measured one per client count: aggregate
generated tokens/s, and the graphs built and the seconds planned in that round (none once the keys are met).

    python3 benchmarks/llama_engine.py [-m MODEL.gguf] [-b cpu|cuda] [-np 16] [-c 16384] [--clients 1,16]
                                       [--requests 2] [--prompt 128] [--gen 64]

Without -m: a SmolLM2-135M-shaped random Q4_1 model (tests/models/llama_tiny.py, its 49152 vocabulary) written once
to /tmp. Session 17 on an H200 (-b cuda, the defaults): 1 client 737 tok/s, 16 clients 4151 (RESULTS.md).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "models")]

from ggpy.server.engine import Engine, Params  # noqa: E402


def default_model() -> Path:
    import gguf
    from llama_tiny import write_tiny_llama
    path = Path("/tmp/ggpy-engine-smollm2-q4_1.gguf")
    if not path.exists():
        q = gguf.GGMLQuantizationType
        mats = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
        write_tiny_llama(path, seed=0, types={"token_embd": q.Q8_0} | dict.fromkeys(mats, q.Q4_1), n_layer=30,
                         n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_ctx=8192, n_vocab=49152, rope_base=100000.0,
                         tied=True)
    return path


def round_of(eng: Engine, clients: int, args, seed0: int) -> tuple:
    """(generated tokens, seconds) of `clients` threads each sending args.requests requests one after another."""
    n_vocab, done = eng.gguf.hparams.n_vocab, []

    def client(c: int):
        rng = np.random.default_rng(seed0 + c)
        for _ in range(args.requests):
            finished, got = threading.Event(), []

            def on(e, got=got, finished=finished):
                if e.token is not None:
                    got.append(e.token)
                if e.finish_reason:
                    finished.set()
            prompt = [int(t) for t in rng.integers(0, min(n_vocab, 320), args.prompt)]
            eng.submit(prompt, Params(max_tokens=args.gen, temperature=0, ignore_eos=True), on)
            finished.wait(args.timeout)
            done.append(len(got))
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model")
    p.add_argument("-b", "--backend", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("-np", "--parallel", type=int, default=16)
    p.add_argument("-c", "--ctx-size", type=int, default=16384)
    p.add_argument("--clients", default="1,16")
    p.add_argument("--requests", type=int, default=2)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--gen", type=int, default=64)
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args(argv)
    path = args.model or default_model()
    print(f"| clients | round | generated | seconds | tok/s | graphs built | planning s |\n{'| --- ' * 7}|")
    for clients in (int(c) for c in args.clients.split(",")):
        eng = Engine(path, args.backend, n_ctx=args.ctx_size, n_parallel=args.parallel).start()
        for name, seed0 in (("warm-up", 1000), ("measured", 0)):
            s = eng.model.stats
            built, planned = s.graphs_built, s.plan_s
            n, dt = round_of(eng, clients, args, seed0)
            print(f"| {clients} | {name} | {n} | {dt:.2f} | {n / dt:.0f} | {s.graphs_built - built} | "
                  f"{s.plan_s - planned:.2f} |", flush=True)
        eng.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
