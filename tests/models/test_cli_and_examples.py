"""The test-backend-ops CLI, the README's demo, the examples' scripts and the models' command lines (console scripts
and the `python -m examples.*` entry points), run as a user would."""
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import ggpy

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_cli_test_mode_prints_one_line_per_case():
    r = run("-m", "ggpy.test_backend_ops", "-o", "win_part", "-t", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("  win_part(")]
    assert len(lines) >= 4 and all(" OK " in line for line in lines)
    assert "cases passed on cpu" in r.stdout


def test_cli_perf_mode_reports_time_and_rate():
    r = run("-m", "ggpy.test_backend_ops", "-o", "mul_mat", "--mode", "perf", "-p", "K=64,M=32")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "us/run" in r.stdout and "GFLOP/s" in r.stdout


def test_cli_rejects_unknown_backend_and_empty_selection():
    r = run("-m", "ggpy.test_backend_ops", "-b", "tpu")
    assert r.returncode == 2 and "unknown backend 'tpu'" in r.stderr and "Traceback" not in r.stderr
    r = run("-m", "ggpy.test_backend_ops", "-o", "no_such_op")
    assert r.returncode == 2 and "no cases match" in r.stderr


def test_demo_matches_numpy():
    r = run("examples/demo.py", "--tokens", "24", "--dim", "32", "--heads", "4", "--runs", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("OK")


def test_console_scripts_name_the_models_mains():
    """pyproject's [project.scripts] are exactly ggpy-sam, ggpy-llama and ggpy-server, each naming a module's main()."""
    tomllib = pytest.importorskip("tomllib")            # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"ggpy-sam": "ggpy.models.mobilesam.cli:main", "ggpy-llama": "ggpy.models.llama.cli:main",
                       "ggpy-server": "ggpy.server.cli:main"}
    for target in scripts.values():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize("entry,prog,words", [
    ("examples.mobilesam", "ggpy-sam", ("convert", "encode", "segment", "everything", "encode-dir")),
    ("examples.llama", "ggpy-llama", ("--prompt", "--n-predict", "--backend")),
])
def test_examples_entry_points_run_the_package_cli(entry, prog, words):
    """`python -m examples.mobilesam` / `examples.llama` from the repository root are the package's command lines."""
    r = run("-m", entry, "-h")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {prog}") and all(w in r.stdout for w in words), r.stdout


def test_segment_point_example(tmp_path):
    """examples/segment_point.py: one point at the sample image's centre, the best mask written as a PNG of the
    image's size (random weights: the mask itself means nothing)."""
    out = tmp_path / "mask.png"
    r = run("examples/segment_point.py", "-o", str(out), "-t", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"-> {out}" in r.stdout
    from ggpy.models.mobilesam.options import SAMPLE_IMAGE
    with Image.open(out) as mask, Image.open(SAMPLE_IMAGE) as image:
        assert mask.size == image.size


def test_readme_tour():
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, (64, 32))
    b = ctx.new_tensor(ggpy.F32, (64, 16))
    c = ggpy.gelu(ggpy.mul_mat(a, b))
    graph = ggpy.Graph()
    graph.build_forward_expand(c)
    backend = ggpy.CPUBackend(n_threads=2)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((32, 64)), rng.standard_normal((16, 64))
    a.set(x)
    b.set(y)
    backend.compute(graph)
    m = y @ x.T
    ref = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m ** 3)))
    assert c.numpy().shape == (16, 32)
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-4, atol=1e-4)
    assert plan.peak_bytes > 0 and "mul_mat" in plan.report()
