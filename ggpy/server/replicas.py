"""ggpy-server --ray: replicas of the server on Ray Serve, behind Serve's one HTTP address (--host, --port).

Each replica is a Ray actor placed by Ray (num_gpus --ray-gpus with -b cuda, num_cpus -t with -b cpu) holding its own
Engine (model, slots, KV cache) and serving create_app's routes (serve.ingress). Serve's proxy routes each request to
a replica (the less busy of two); its controller replaces a replica that dies, and a request in flight on that one
fails (a stream is cut short).

    ray.init(); serve.run(deployment(args, path, n_ctx).bind(), name=NAME)     # args: cli.parser()'s
"""
from __future__ import annotations

import sys

import ray
from ray import serve

from .app import create_app
from .engine import Engine

NAME = "ggpy-server"
ROOM = 8        # requests a replica takes beside a full engine queue: /health, /metrics, ... (its engine 503s the rest)


def deployment(args, path: str, n_ctx: int) -> serve.Deployment:
    """The Serve deployment of ggpy-server's parsed `args`: args.replicas replicas (None: default_replicas)."""

    def build():        # in the replica: the app once its engine is loaded, so Serve routes to it only then
        engine = Engine(path, args.backend, args.threads, n_ctx, args.parallel, args.batch_size, args.max_queue,
                        not args.no_warmup)
        return create_app(engine.start(), args.api_key, args.alias)

    resources = {"num_gpus": args.ray_gpus} if args.backend == "cuda" else {"num_cpus": args.threads}
    return serve.deployment(serve.ingress(build)(), name=NAME, num_replicas=args.replicas or default_replicas(args),
                            ray_actor_options=resources, max_ongoing_requests=args.parallel + args.max_queue + ROOM)


def default_replicas(args) -> int:
    """-b cuda: as many replicas as the cluster's GPUs hold (--ray-gpus each); -b cpu: one."""
    if args.backend != "cuda":
        return 1
    return max(1, int(ray.cluster_resources().get("GPU", 0) // args.ray_gpus))


def run(args, path: str, n_ctx: int):
    """Connect to the cluster at args.ray (''/None: ray.init's default), deploy, serve until SIGINT or SIGTERM."""
    ray.init(address=args.ray or None)
    serve.start(http_options={"host": args.host, "port": args.port})
    app = deployment(args, path, n_ctx)
    print(f"ggpy-server --ray: {app.num_replicas} replicas of {path}, {args.parallel} slots each, -b {args.backend}; "
          f"http://{args.host}:{args.port}", file=sys.stderr)
    try:
        serve.run(app.bind(), name=NAME, route_prefix="/", blocking=True)
    except KeyboardInterrupt:
        pass
    finally:
        serve.delete(NAME)      # a cluster that outlives this process keeps no replicas of it
