"""ggpy-server --ray with 1 and with 2 replicas behind Serve's one address (issue 32): for each replica count, the
load generator's (llama_server.py) aggregate generated tokens/s, TTFT p50 / p95 and requests answered at each client
count (after an unmeasured pass of it); then, with --kill, one replica's process killed while clients run: what failed then, whether every later
request is answered, and how long Ray took to bring the replica back.

    python benchmarks/serve_replicas.py -m MODEL.gguf [-b cuda] [--replicas 1,2] [--ray-gpus 1] [--clients 32,64]
        [--requests 4] [--prompt 128] [--gen 64] [--kill] [--port 8090] [-- SERVER ARGS ...]

Each replica count runs its own `ggpy-server -m MODEL --ray --replicas R` (a local Ray cluster it starts, as a user
runs it) in a session of its own, stopped with SIGTERM after. --ray-gpus G is each replica's share of a GPU (0.5: two
replicas on one GPU, the plumbing without a second GPU). A replica is a process titled ray::ServeReplica:...; --kill
sends one SIGKILL. Traffic goes only to 127.0.0.1. The last line is the whole result as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from llama_server import Target, load_arguments, run

READY_S = 600           # a replica count's server may take this long to load and plan every replica
SERVER = "from ggpy.server.cli import main; main()"


def replica_pids() -> list:
    """Process ids of this machine's Serve replicas (Ray titles their worker processes ray::ServeReplica:...)."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().startswith(b"ray::ServeReplica"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


STATUS = ("import ray; from ray import serve; from ggpy.server.replicas import NAME; "
          "ray.init(address='auto', log_to_driver=False, logging_level='error'); "
          "app = serve.status().applications.get(NAME); print(app.status if app else None)")


def app_running() -> bool:
    """Whether the server's Serve application runs every replica it asks, as a driver that joins the server's local
    cluster says (a process of its own each time: Serve keeps a cluster's controller for the process's life)."""
    try:
        r = subprocess.run([sys.executable, "-c", STATUS], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0 and r.stdout.strip().endswith("RUNNING")


def start(args, replicas: int) -> subprocess.Popen:
    """ggpy-server with `replicas` replicas, once Serve says its application runs them all and the proxy answers
    /health."""
    cmd = [sys.executable, "-c", SERVER, "-m", args.model, "-b", args.backend, "--ray", "--replicas", str(replicas),
           "--ray-gpus", str(args.ray_gpus), "--port", str(args.port), *args.server_args]
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.monotonic() + READY_S
    try:
        while not (len(replica_pids()) >= replicas and app_running() and healthy(args.url)):
            if proc.poll() is not None:
                raise SystemExit(f"error: {' '.join(cmd)} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"error: {replicas} replicas not up in {READY_S} s")
            time.sleep(1)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen):
    """SIGTERM the server (it deletes its Serve app), then whatever of its session is left."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 60
    while replica_pids() and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in replica_pids():          # a replica Ray left behind (its own process group)
        os.kill(pid, signal.SIGKILL)


def kill_test(args, target) -> dict:
    """--kill-clients clients of --kill-requests requests each, one replica's process killed --kill-after s into their
    run, then one more pass of them: the failures of each pass, whether the kill came while they ran, and the seconds
    until a replica runs again in the killed one's place."""
    before = replica_pids()
    result = {}
    load = threading.Thread(target=lambda: result.update(during=run(target, args.kill_clients, args.kill_requests,
                                                                      args)))
    load.start()
    time.sleep(args.kill_after)
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    t_kill, result["killed_while_running"] = time.monotonic(), load.is_alive()
    load.join()
    result["after"] = run(target, args.kill_clients, args.requests, args, salt=3)
    while len([p for p in replica_pids() if p != victim]) < len(before):
        if time.monotonic() - t_kill > READY_S:
            break
        time.sleep(0.5)
    result["back_s"] = round(time.monotonic() - t_kill, 1) if len(replica_pids()) >= len(before) else None
    return result


def main(argv=None):
    if replica_pids():
        raise SystemExit("error: Serve replicas already run on this machine (ray::ServeReplica processes): stop them first")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-b", "--backend", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--replicas", default="1,2", help="replica counts, comma-separated")
    p.add_argument("--ray-gpus", type=float, default=1.0, help="each replica's GPUs (0.5: two on one GPU)")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--clients", default="32,64", help="client counts, comma-separated")
    load_arguments(p)
    p.add_argument("--kill", action="store_true", help="with the largest replica count: kill one replica mid-run")
    p.add_argument("--kill-clients", type=int, default=16)
    p.add_argument("--kill-requests", type=int, default=16, help="requests per client of the run a replica dies in")
    p.add_argument("--kill-after", type=float, default=3.0, help="seconds into the run")
    p.add_argument("server_args", nargs="*", help="more ggpy-server arguments (after --)")
    args = p.parse_args(argv)
    args.url, args.text, args.pid = f"http://127.0.0.1:{args.port}", False, None
    target, table, kill = Target(args.url, None), {}, None
    counts = [int(x) for x in args.replicas.split(",")]
    for r in counts:
        proc = start(args, r)
        try:
            run(target, 1, 1, args, salt=2)                 # every replica's first request is not measured
            table[r] = []
            for n in (int(x) for x in args.clients.split(",")):
                run(target, n, args.requests, args, salt=1)     # unmeasured first: the batch shapes planned
                table[r].append(run(target, n, args.requests, args))
            if args.kill and r == max(counts):
                kill = kill_test(args, target)
        finally:
            stop(proc)
    print("| replicas | clients | answered | generated tok/s | vs 1 replica | TTFT p50 s | TTFT p95 s |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    for r, rows in table.items():
        for i, row in enumerate(rows):
            base = table.get(1, table[counts[0]])[i]["gen_tok_s"]
            print(f"| {r} | {row['clients']} | {row['answered']} / {row['sent']} | {row['gen_tok_s']:.1f} | "
                  f"{row['gen_tok_s'] / base:.2f} | {row['ttft_p50_s']:.3f} | {row['ttft_p95_s']:.3f} |")
    if kill is not None:
        d, a = kill["during"], kill["after"]
        print(f"kill ({'while' if kill['killed_while_running'] else 'AFTER'} the clients ran): {d['answered']} / "
              f"{d['sent']} answered then {d['failures'][:1]}; after it {a['answered']} / {a['sent']}; a replica back "
              f"after {kill['back_s']} s")
    print(json.dumps({"table": table, "kill": kill}))


if __name__ == "__main__":
    main()
