"""A CPU program's kernels are compiled together before its first evaluation (precompile.py): in worker
processes, with progress on stderr, saved in numba's disk cache; run as a fresh process with an empty cache."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import numpy as np
import ggpy

ctx = ggpy.Context()
a = ctx.new_tensor(ggpy.F32, (48, 40))
b = ctx.new_tensor(ggpy.F32, (48, 300))
h = ggpy.soft_max(ggpy.gelu(ggpy.mul_mat(a, b)))
out = ggpy.norm(ggpy.add(h, ggpy.cont(ggpy.transpose(ggpy.scale(ggpy.mul_mat(b, a), 0.5)))), 1e-5)
graph = ggpy.Graph().build_forward_expand(out)
backend = ggpy.CPUBackend(n_threads=2)
ggpy.GraphAllocator(backend).alloc_graph(graph)
rng = np.random.default_rng(0)
x, y = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((300, 48)).astype(np.float32)
a.set(x)
b.set(y)
backend.compute(graph)
m = y.astype(np.float64) @ x.T
g = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m ** 3)))
e = np.exp(g - g.max(axis=1, keepdims=True))
r = e / e.sum(axis=1, keepdims=True) + 0.5 * m
r = (r - r.mean(axis=1, keepdims=True)) / np.sqrt(r.var(axis=1, keepdims=True) + 1e-5)
err = np.abs(out.numpy() - r).max()
assert err < 1e-3, err
print("OK", len(backend.program(graph)))
"""


def _run(cache_dir, workers, **env):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), GGPY_COMPILE_WORKERS=str(workers), PYTHONPATH=str(ROOT),
               **env)
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_first_run_compiles_in_workers_with_progress_then_loads_from_cache(tmp_path):
    r = _run(tmp_path, 2)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
    header = [line for line in r.stderr.splitlines() if line.startswith("compiling ") and "CPU kernels in 2" in line]
    assert header, r.stderr
    total = int(header[0].split()[1])
    done = [line for line in r.stderr.splitlines() if line.startswith("compiling CPU kernels: ")]
    assert len(done) == total and done[-1].startswith(f"compiling CPU kernels: {total}/{total} "), r.stderr
    assert any("mul_mat" in line for line in done), r.stderr
    again = _run(tmp_path, 2)                   # everything now comes from this process's disk cache
    assert again.returncode == 0 and again.stdout == r.stdout, again.stdout + again.stderr
    assert "compiling" not in again.stderr, again.stderr


def test_progress_can_be_silenced_and_compiles_in_process(tmp_path):
    r = _run(tmp_path, 1, GGPY_PROGRESS="0")
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
    assert "compiling" not in r.stderr, r.stderr


def test_kernels_a_worker_does_not_deliver_are_compiled_here(tmp_path):
    broken = ("import subprocess, sys\n"
              "from ggpy.backends.cpu import precompile\n"
              "precompile._start_worker = lambda cache_dir: subprocess.Popen([sys.executable, '-c', 'print(\"start 0\")'],"
              " stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), GGPY_COMPILE_WORKERS="2", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", broken + SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
    lines = r.stderr.splitlines()
    total = int(next(line for line in lines if line.startswith("compiling ") and "in 2 processes" in line).split()[1])
    assert f"compiling CPU kernels: {total}/{total} " in r.stderr, r.stderr
