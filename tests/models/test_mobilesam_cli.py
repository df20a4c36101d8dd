"""The MobileSAM runner's command line, with seeded random weights (no torch needed)."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ggpy.models.mobilesam.convert import convert_state_dict
from ggpy.models.mobilesam.random_weights import random_state_dict

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ggpy.models.mobilesam", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def random_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("mobilesam") / "random.gguf"
    convert_state_dict(random_state_dict(seed=3), path, type="f32", progress=False)
    return path


def test_encode_writes_embedding_and_bench_line(random_gguf, tmp_path):
    """Also: the CUDA flags --tf32 and --no-cuda-graphs are accepted and ignored on -b cpu."""
    out = tmp_path / "emb.npy"
    r = cli("encode", "-m", str(random_gguf), "-o", str(out), "-t", "2", "--bench", "2", "-b", "cpu", "--tf32",
            "--no-cuda-graphs")
    assert r.returncode == 0, r.stderr
    emb = np.load(out)
    assert emb.shape == (1, 256, 64, 64) and emb.dtype == np.float32 and np.isfinite(emb).all()
    assert emb.std() > 0.1                       # LayerNorm2d output: O(1) values, not zeros
    assert "planned compute memory" in r.stdout and "time per stage" in r.stdout
    last = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"median_ms=([0-9.]+) min_ms=([0-9.]+) runs=2", last)
    assert m and float(m.group(2)) <= float(m.group(1))


def test_backend_options_go_to_cuda_names_only():
    """The encoder makes its backend by name with TF32 and CUDA graphs only for CUDA names (make_backend refuses
    options a backend does not take)."""
    from ggpy.errors import OptionError
    from ggpy.backends import make_backend
    from ggpy.models.mobilesam.runner import backend_options
    assert backend_options("cpu", True, False) == {}
    for name in ("cuda", "cuda:1"):
        assert backend_options(name, True, False) == {"allow_tf32": True, "graphs": False}
        assert backend_options(name, False, True) == {"allow_tf32": False, "graphs": True}
    with pytest.raises(OptionError):
        make_backend("cpu", 2, **backend_options("cuda", True, False))


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


def test_encode_several_images_in_batches(random_gguf, tmp_path):
    """A directory and a file, in batches of 2 (the last one padded), F16 activations: one .npy per image that
    equals the embedding of that image encoded alone, up to F16 rounding (bit-equal on the AVX-512 hosts CI ran on; on an
    AVX2 host the batch of 2 changed the last bits of some products and the F16 activations carried that to 2.5e-3 of
    the largest value, also with every mul_mat on BLAS), and not the other images' embeddings."""
    from PIL import Image
    rng = np.random.default_rng(3)
    d = tmp_path / "images"
    d.mkdir()
    for i, (h, w) in enumerate([(40, 60), (50, 30)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"im{i}.png")
    single = tmp_path / "single.png"
    Image.fromarray(rng.integers(0, 256, (33, 33, 3), dtype=np.uint8)).save(single)
    out = tmp_path / "emb"
    r = cli("encode", "-m", str(random_gguf), "-i", str(d), "-i", str(single), "-o", str(out), "-t", "2",
            "--batch", "2", "--dtype", "f16")
    assert r.returncode == 0, r.stderr
    assert "[2/3]" in r.stdout and "[3/3]" in r.stdout
    alone = tmp_path / "alone.npy"
    r = cli("encode", "-m", str(random_gguf), "-i", str(single), "-o", str(alone), "-t", "2", "--dtype", "f16")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["im0.png.npy", "im1.png.npy", "single.png.npy"]
    got, ref = np.load(out / "single.png.npy"), np.load(alone)
    assert got.shape == (1, 256, 64, 64) and np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    for other in ("im0.png.npy", "im1.png.npy"):
        assert np.abs(np.load(out / other) - ref).max() > 0.1 * np.abs(ref).max()


def test_encode_refuses_bad_batch_and_dtype(random_gguf, tmp_path):
    for args, what in ((("--batch", "0"), "positive number"), (("--dtype", "f8"), "invalid choice")):
        r = cli("encode", "-m", str(random_gguf), "-o", str(tmp_path / "e.npy"), *args)
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr
