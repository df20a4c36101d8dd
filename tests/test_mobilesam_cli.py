"""The MobileSAM runner's command line, with seeded random weights (no torch needed)."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from examples.mobilesam.convert import convert_state_dict
from examples.mobilesam.random_weights import random_state_dict

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "examples.mobilesam", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def random_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("mobilesam") / "random.gguf"
    convert_state_dict(random_state_dict(seed=3), path, type="f32", progress=False)
    return path


def test_encode_writes_embedding_and_bench_line(random_gguf, tmp_path):
    out = tmp_path / "emb.npy"
    r = cli("encode", "-m", str(random_gguf), "-o", str(out), "-t", "2", "--bench", "2")
    assert r.returncode == 0, r.stderr
    emb = np.load(out)
    assert emb.shape == (1, 256, 64, 64) and emb.dtype == np.float32 and np.isfinite(emb).all()
    assert emb.std() > 0.1                       # LayerNorm2d output: O(1) values, not zeros
    assert "planned compute memory" in r.stdout and "time per stage" in r.stdout
    last = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"median_ms=([0-9.]+) min_ms=([0-9.]+) runs=2", last)
    assert m and float(m.group(2)) <= float(m.group(1))


def test_encode_refuses_bad_inputs(random_gguf, tmp_path):
    r = cli("encode", "-m", str(random_gguf), "-i", str(tmp_path / "missing.jpg"), "-o", str(tmp_path / "e.npy"))
    assert r.returncode != 0 and "missing.jpg" in r.stderr and "Traceback" not in r.stderr
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"not a model file at all")
    r = cli("encode", "-m", str(not_gguf), "-o", str(tmp_path / "e.npy"))
    assert r.returncode != 0 and "model.gguf" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "e.npy").exists()


def test_encode_refuses_a_file_that_is_not_an_image(random_gguf, tmp_path):
    bad = tmp_path / "notes.jpg"
    bad.write_text("not an image")
    r = cli("encode", "-m", str(random_gguf), "-i", str(bad), "-o", str(tmp_path / "e.npy"))
    assert r.returncode != 0 and "notes.jpg" in r.stderr and "Traceback" not in r.stderr
