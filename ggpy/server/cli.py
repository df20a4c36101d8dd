"""`ggpy-server` (also `python -m examples.llama.server` from the repository root): a llama-family GGUF behind an
OpenAI-compatible HTTP API, flags in llama-server's spelling:

    ggpy-server [-m MODEL.gguf] [--host 127.0.0.1] [--port 8080] [-b cpu|cuda] [-t THREADS] [-c CTX] [-np N]
                [--batch-size N] [--max-queue N] [--api-key KEY] [-a ALIAS] [--no-warmup]
                [--ray [ADDRESS] [--replicas N] [--ray-gpus G]]

-c is the KV cells all N slots share (each holds CTX // N tokens; 0: the model's context, at most 4096); without
-m, SmolLM2-135M-Instruct (Q4_1) is fetched once, as ggpy-llama does. The port answers at once: /health says
503 until the weights are loaded, then 200. While no request is in, the engine plans the graphs of the generating
steps it will meet (one for each bucket of slots and cache rows; --no-warmup: each when first met). A bad argument
or model file ends the run with one `error: ...` line (exit status 2 for an argument, 1 for a file).

--ray serves N replicas on Ray Serve behind the one --host:--port (replicas.py), each with its own -c, -np and
--max-queue: on -b cuda G GPUs each (1; 0.5: two share one), N by default as many as the cluster's GPUs hold; on
-b cpu -t cores each, N by default 1.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

import ggpy
from ggpy.models.llama.cli import MAX_THREADS, _at_least, context_size
from ggpy.models.llama.fetch import FetchError, default_model
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.runner import DEFAULT_BATCH


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ggpy-server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help="GGUF file of a llama-family model (default: SmolLM2-135M-Instruct Q4_1, "
                   "fetched once)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1: this machine only)")
    p.add_argument("--port", type=_at_least(0, int, 65535), default=8080, help="port (8080; 0: any free one)")
    p.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("-t", "--threads", type=_at_least(1, int, MAX_THREADS), default=os.cpu_count(), metavar="THREADS",
                   help="CPU workers (the cores)")
    p.add_argument("-c", "--ctx-size", type=_at_least(0), default=0, metavar="CTX",
                   help="KV cells shared by the slots; 0: the model's context, at most 4096 (0)")
    p.add_argument("-np", "--parallel", type=_at_least(1), default=4, metavar="N", help="parallel slots (4)")
    p.add_argument("--batch-size", type=_at_least(1), default=DEFAULT_BATCH, metavar="N",
                   help=f"the most tokens one evaluation reads ({DEFAULT_BATCH})")
    p.add_argument("--max-queue", type=_at_least(0), default=64, metavar="N",
                   help="requests that may wait for a slot; more are answered 503 (64)")
    p.add_argument("--api-key", help="every path but /health then needs `Authorization: Bearer KEY`")
    p.add_argument("-a", "--alias", help="the model's name in the answers (default: the file's stem)")
    p.add_argument("--no-warmup", action="store_true", help="plan each graph when a step first meets it, not ahead "
                   "while idle")
    p.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="replicas on Ray Serve, on the cluster at "
                   "ADDRESS (none: ray.init's default, a cluster `ray start`ed here or else a new local one)")
    p.add_argument("--replicas", type=_at_least(1), metavar="N", help="--ray: replicas (-b cuda: the GPUs over G; "
                   "-b cpu: 1)")
    p.add_argument("--ray-gpus", type=_at_least(0.01, float, 64), default=1.0, metavar="G",
                   help="--ray -b cuda: the GPUs each replica holds (1)")
    return p


def serve_replicas(args, path, n_ctx):
    try:
        from .replicas import run
    except ImportError as e:
        sys.exit(f"error: --ray needs the ray extra (pip install 'ggpy[ray,server]'): {e}")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run(args, str(path), n_ctx)


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    try:
        import uvicorn

        from .app import create_app
        from .engine import Engine
    except ImportError as e:
        sys.exit(f"error: ggpy-server needs the server extra (pip install 'ggpy[server]'): {e}")
    try:
        path = args.model or default_model()
        n_ctx = context_size(open_llama(path).hparams, args.ctx_size)
        if n_ctx < args.parallel:
            p.error(f"-c {n_ctx} leaves {args.parallel} slots no room: need -c >= -np")
        if args.ray is not None:
            return serve_replicas(args, path, n_ctx)
        engine = Engine(path, args.backend, args.threads, n_ctx, args.parallel, args.batch_size, args.max_queue,
                        not args.no_warmup)
    except (ggpy.GGPYError, FetchError, OSError, ValueError) as e:
        sys.exit(f"error: {e}")
    failure = []

    def load_failed(e):
        failure.append(e)
        server.should_exit = True

    app = create_app(engine, args.api_key, args.alias, on_load_error=load_failed)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info"))
    print(f"ggpy-server: {engine.model_path}, {args.parallel} slots of {engine.n_ctx_slot} tokens, -b {args.backend}; "
          f"http://{args.host}:{args.port}", file=sys.stderr)
    signal.signal(signal.SIGTERM, signal.default_int_handler)     # uvicorn stops on either, then raises it again
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if failure:
        sys.exit(f"error: loading {engine.model_path} failed: {failure[0]}")
