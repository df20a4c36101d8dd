"""A fresh GPU machine's start-up: seconds from the command to the first embedding (`ggpy-sam encode -b cuda`) and
to the end of a short generation (`ggpy-llama -b cuda -n 8`), with empty kernel caches (NVRTC's and numba's), then
again with the caches filled. Run from the repository root on the GPU machine:

    python3 benchmarks/first_run_gpu.py [--python python3]

Every run is a subprocess of `python -m examples.mobilesam` / `python -m examples.llama` (the console scripts' entry
points); each output line is time-stamped as it arrives. The llama model is a SmolLM2-135M-shaped random Q4_1 GGUF
(benchmarks/llama_gpu.py's), written first and not timed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_lines(cmd: list, env: dict) -> tuple[list, int]:
    """[(seconds since start, line)] of the command's merged stdout and stderr, and its exit status."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    lines = [(time.perf_counter() - t0, line.rstrip("\n")) for line in proc.stdout]
    return lines, proc.wait()


def first(lines: list, marker: str) -> float | None:
    return next((t for t, line in lines if marker in line), None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable)
    opts = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ggpy-first-run-"))
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from llama_gpu import synthetic_model
    llama_file = synthetic_model(work, "q4_1")
    sam = [opts.python, "-u", "-m", "examples.mobilesam", "encode", "-b", "cuda", "--bench", "1",
           "-o", str(work / "embedding.npy")]
    llama = [opts.python, "-u", "-m", "examples.llama", "-m", str(llama_file), "-b", "cuda", "-p", "Hello",
             "-n", "8", "--temp", "0"]
    env = dict(os.environ, GGPY_CUDA_CACHE=str(work / "cuda"), NUMBA_CACHE_DIR=str(work / "numba"),
               PYTHONUNBUFFERED="1")
    rows = []
    for name, cmd, marker in (("encode -b cuda", sam, "embedding ("), ("llama -b cuda -n 8", llama, "n_prompt=")):
        for cache in ("cuda", "numba"):
            shutil.rmtree(work / cache, ignore_errors=True)
        for state in ("cold", "warm"):
            lines, status = timed_lines(cmd, env)
            rows.append((f"{name}, {state} caches", first(lines, marker), lines[-1][0] if lines else None, status,
                         lines))
    print("| command | to first result s | total s | exit |\n| --- | ---: | ---: | ---: |")
    for name, to_first, total, status, _ in rows:
        print(f"| {name} | {to_first if to_first is None else round(to_first, 1)} | "
              f"{total if total is None else round(total, 1)} | {status} |")
    for name, *_, lines in rows:
        print(f"\n--- {name}")
        for t, line in lines[-25:]:
            print(f"{t:7.2f} {line}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
