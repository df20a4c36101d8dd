"""encode-dir on Ray: Ray Data streams the images (read and pre-processed by tasks) through a pool of encoder actors,
one per GPU or per THREADS CPU cores, each holding one planned ImageEncoder; the driver gets the manifest rows
as batches finish. Paths are absolute: on several nodes, IMAGES, EMBEDDINGS and the model are on shared storage.
The workers import this package from their own environment (nothing is shipped): install the same ggpy[sam,ray]
on every node (a local cluster's workers share the driver's)."""
from __future__ import annotations

import logging
import math
import os
import socket

from .batch import BatchEncoder, JobError, per_call, read_image

READS_PER_TASK = 4
"""Images per read task (a Ray Data block, whose bookkeeping is the driver's): with one image a block, two H200 actors
reached 1.63-1.78x one actor's steady rate; with 4, 2.07-2.09x (RESULTS.md, issue 18; different machines)."""


def check_reachable(address: str, timeout: float = 10):
    """A HOST:PORT or ray://HOST:PORT address answers (ray.init would retry a wrong one for minutes); JobError if not."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise JobError(f"--ray {address!r} is not an address: expected HOST:PORT (`ray start --head` prints it, "
                       "port 6379 by default), ray://HOST:PORT (Ray Client, port 10001), auto, or nothing (a local cluster)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise JobError(f"cannot reach the Ray cluster at {address} ({e}); expected a running head node there") from None


def connect(address: str) -> bool:
    """Join the cluster at `address` ('': the one RAY_ADDRESS names or `ray start` started on this machine, else a
    new local one, as ray.init does); True when this call started or joined it (and so shuts it down)."""
    import ray
    if address not in ("", "auto"):
        check_reachable(address)
    if ray.is_initialized():
        return False
    if not address:        # a local cluster's encoders at the driver's priority: Ray nices workers by 15 by default
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(address=address or None, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise JobError(f"cannot join the Ray cluster at {address!r}: {e}") from None
    return True


def pool_size(backend: str, threads: int) -> int:
    """Encoder actors the cluster holds: one per GPU, or per `threads` CPUs of each node."""
    import ray
    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    if backend == "cuda":
        n = sum(int(r.get("GPU", 0)) for r in nodes)
        if n == 0:
            raise JobError("-b cuda: the Ray cluster has no GPU; expected nodes started with GPUs (or -b cpu)")
        return n
    n = sum(int(r.get("CPU", 0) // threads) for r in nodes)
    if n == 0:
        raise JobError(f"-t {threads}: no node of the Ray cluster has {threads} CPUs "
                       f"(its nodes have {sorted(int(r.get('CPU', 0)) for r in nodes)}); expected a smaller -t")
    return n


def stream_on_ray(items: list, settings: dict, prep: dict, address: str):
    """Manifest-row columns per finished batch (see BatchEncoder), computed on the Ray cluster at `address`;
    joins it (or starts a local one) before returning, JobError when it cannot."""
    import ray
    started = connect(address)
    try:
        return _batches(dataset(items, settings, prep), started)
    except BaseException:
        if started:
            ray.shutdown()
        raise


def dataset(items: list, settings: dict, prep: dict):
    """The Ray Data pipeline: items -> read tasks -> a pool of BatchEncoder actors -> manifest-row columns."""
    import ray
    cpu = settings["backend"] == "cpu"
    settings = dict(settings, threads=settings["threads"] or 1) if cpu else settings
    call = per_call(settings)
    actors = min(pool_size(settings["backend"], settings["threads"] if cpu else 1), math.ceil(len(items) / call))
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False                     # the driver's bar counts images
    # Read ahead about 4 calls per actor, not Ray Data's default share of the object store (GiBs: a 40-image
    # folder was read whole ahead of 2 CPU actors here); a read image is uint8, S x S x 3 at most.
    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
        object_store_memory=max(4 * actors * call, 16) * 3 * prep["image_size"] ** 2)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)   # says the bars are off
    blocks = min(math.ceil(len(items) / READS_PER_TASK), 20_000)
    ds = ray.data.from_items(items, override_num_blocks=blocks)
    # On the CPU the actors hold every core: reading (a small part of the work) takes none, a few at a time.
    ds = ds.map(read_image, fn_kwargs={"prep": prep}, num_cpus=0 if cpu else 1,
                compute=ray.data.TaskPoolStrategy(size=min(2 * actors, blocks)) if cpu else None)
    return ds.map_batches(BatchEncoder, fn_constructor_kwargs=settings, batch_size=call,
                          batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
                          num_cpus=settings["threads"] if cpu else 1, num_gpus=0 if cpu else 1)


def _batches(ds, started: bool):
    """Iterate the pipeline as it streams; a Ray failure becomes a JobError; shut down a cluster this job started."""
    import ray
    try:
        yield from ds.iter_batches(batch_size=None, batch_format="numpy")
    except ray.exceptions.RayError as e:                 # its text ends with the cause, after the remote traceback
        cause = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise JobError(f"the Ray job stopped: {cause} (the traceback is in Ray's logs, "
                       "/tmp/ray/session_latest/logs on the node that failed)") from None
    finally:
        if started:
            ray.shutdown()
