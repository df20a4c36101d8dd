"""`encode-dir` on a folder of small images (a nested folder, a corrupt JPEG, a text file named .png), with a local
Ray cluster of 2 CPUs (and one declared GPU) shared by the module: a Ray job killed part-way then rerun in-process,
a whole Ray job in batches, a write killed half-way, failures (a write, an actor, a wrong address), the manifest."""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ggpy.models.mobilesam.cli import main
from ggpy.models.mobilesam.jobs.encode_dir import LOCK, MANIFEST, Manifest
from ggpy.models.mobilesam.preprocess import load_image

ROOT = Path(__file__).resolve().parents[2]
READABLE = ["a.png", "b.jpg", "c.png", "f.png", "g.jpg", "sub/deeper/d.png", "sub/e.jpg"]
UNREADABLE = ["broken.jpg", "sub/notes.png"]


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray cluster of 2 CPUs and 1 GPU (declared: the -b cuda actor is placed even where there is none) for
    the module; the CLI joins it by address."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from ggpy.models.mobilesam.convert import convert_state_dict
    from ggpy.models.mobilesam.random_weights import random_state_dict
    path = tmp_path_factory.mktemp("model") / "random.gguf"
    convert_state_dict(random_state_dict(seed=3), path, type="f32", progress=False)
    return path


@pytest.fixture(scope="module")
def references(tmp_path_factory, model):
    """{image: its embedding by `encode` alone} (an ImageEncoder of batch 1, as `encode` uses for one image)."""
    from ggpy.models.mobilesam.runner import ImageEncoder
    images, enc = make_images(tmp_path_factory.mktemp("images")), ImageEncoder(model, n_threads=2)
    return {name: enc.encode(load_image(images / name)) for name in READABLE}


def check_embeddings(out: Path, references: dict):
    """Every embedding in `out` equals the image's own (up to the rounding of batched GEMMs)."""
    for name, ref in references.items():
        got = np.load(out / (name + ".npy"))
        assert got.shape == (1, 256, 64, 64) and got.dtype == np.float32
        assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max(), name


def make_images(root: Path) -> Path:
    """READABLE (small, odd sizes), a cut-off JPEG, a text file named .png and a file that is not an image."""
    from PIL import Image
    rng = np.random.default_rng(17)
    for i, name in enumerate(READABLE):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (24 + 7 * i, 40 - 5 * i, 3), dtype=np.uint8)).save(root / name)
    jpeg = (root / "b.jpg").read_bytes()
    (root / "broken.jpg").write_bytes(jpeg[:len(jpeg) // 2])
    (root / "sub" / "notes.png").write_text("not an image")
    (root / "sub" / "readme.txt").write_text("not an image either: skipped by its name")
    return root


def cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "ggpy.models.mobilesam", "encode-dir", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def manifest_rows(out: Path) -> list:
    return [json.loads(line) for line in (out / MANIFEST).read_text().splitlines()]


def kill_after_first_output(proc, out: Path, timeout: float = 300):
    """SIGKILL `proc` as soon as one embedding is in `out`."""
    t0 = time.monotonic()
    while not any(p.name.endswith(".npy") and not p.name.startswith(".") for p in out.rglob("*")):
        assert proc.poll() is None, f"the job ended before writing anything: {proc.communicate()}"
        assert time.monotonic() - t0 < timeout
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def wait_for_idle(ray, cpus: float = 2.0, timeout: float = 120):
    """Until the actors of a killed driver are gone (their CPUs free again), so that none writes during a rerun."""
    t0 = time.monotonic()
    while ray.available_resources().get("CPU", 0) < cpus:
        assert time.monotonic() - t0 < timeout, ray.available_resources()
        time.sleep(0.2)


def test_killed_ray_job_rerun_encodes_every_image_once(tmp_path, model, references, ray_address):
    import ray
    images, out = make_images(tmp_path / "images"), tmp_path / "emb"
    kill_after_first_output(cli(images, "-o", out, "-m", model, "-t", "1", "--ray", ray_address), out)
    wait_for_idle(ray)
    first = manifest_rows(out) if (out / MANIFEST).exists() else []
    encoded = [p for p in out.rglob("*.npy") if not p.name.startswith(".")]
    assert len(encoded) < len(READABLE), "the kill came too late to test a rerun"
    # As if the kill had come between the embeddings' renames and their rows, in the middle of a write:
    kept = [r for r in first if r["status"] != "ok"]
    (out / MANIFEST).write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"image": "a.p')
    (out / "sub").mkdir(exist_ok=True)
    (out / "sub" / ".e.jpg.npy.0123abcd.tmp").write_bytes(b"half an embedding")

    rerun = cli(images, "-o", out, "-m", model, "-t", "2", "--batch", "2")
    stdout, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    assert " 0 failed" in stdout.strip().splitlines()[-1] and "img/s" in stderr

    rows = manifest_rows(out)
    for name in READABLE:
        ok = [r for r in rows if r["image"] == name and r["status"] == "ok"]
        assert len(ok) == 1 and ok[0]["output"] == name + ".npy", rows
    for name in UNREADABLE:
        bad = [r for r in rows if r["image"] == name]
        assert len(bad) == 1 and bad[0]["status"] == "unreadable" and "cannot read" in bad[0]["error"], rows
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == sorted([MANIFEST, LOCK] + [n + ".npy" for n in READABLE])       # no temporary left

    check_embeddings(out, references)

    again = cli(images, "-o", out, "-m", model, "--ray", ray_address)
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stderr
    assert "0 encoded, 0 unreadable, 0 failed in" in stdout
    assert f"earlier runs: {len(READABLE)} encoded, 2 unreadable" in stdout
    assert manifest_rows(out) == rows


def test_a_ray_job_encodes_in_batches_on_two_actors(tmp_path, model, references, ray_address):
    images, out = make_images(tmp_path / "images"), tmp_path / "emb"
    proc = cli(images, "-o", out, "-m", model, "-t", "1", "--batch", "2", "--ray", ray_address)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    assert f"{len(READABLE)} encoded, 2 unreadable, 0 failed" in stdout.strip().splitlines()[-1]
    for name in UNREADABLE:
        assert f"unreadable: {name}: cannot read" in stderr
    check_embeddings(out, references)


def test_an_embedding_that_cannot_be_written_fails_the_job(tmp_path, model):
    """Exit status 1 and a summary line when a readable image is not encoded (here: its output is a directory)."""
    from PIL import Image
    images, out = tmp_path / "images", tmp_path / "emb"
    images.mkdir()
    for name in ("x.png", "y.png"):
        Image.fromarray(np.full((16, 20, 3), 90, np.uint8)).save(images / name)
    (out / "y.png.npy").mkdir(parents=True)
    proc = cli(images, "-o", out, "-m", model, "-t", "2")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1
    assert "1 encoded, 0 unreadable, 1 failed" in stdout.strip().splitlines()[-1]
    assert "failed: y.png: cannot write the embedding" in stderr
    assert [r["status"] for r in manifest_rows(out)] == ["ok", "failed"]


def test_manifest_drops_a_partial_last_row_and_refuses_a_corrupt_one(tmp_path):
    path = tmp_path / MANIFEST
    path.write_text('{"image": "a.png", "status": "ok"}\n{"image": "b.p')
    m = Manifest(path)
    assert list(m.rows) == ["a.png"] and path.read_text().endswith("}\n")
    m.append([{"image": "b.png", "status": "ok"}])
    assert [json.loads(line)["image"] for line in path.read_text().splitlines()] == ["a.png", "b.png"]
    path.write_text('{"image": "a.png"}\nnot json\n{"image": "b.png"}\n')
    with pytest.raises(ValueError, match="line 2 is not a manifest row"):
        Manifest(path)


@pytest.mark.parametrize("case", ["missing", "empty", "output is a file"])
def test_bad_directories_get_a_clear_error(tmp_path, case):
    images, out = tmp_path / "images", tmp_path / "emb"
    if case != "missing":
        images.mkdir()
        (images / "notes.txt").write_text("no image here")
    if case == "output is a file":
        (images / "a.png").write_bytes(b"")
        out.write_text("")
    expected = {"missing": "is not a directory", "empty": "holds no image", "output is a file": "is a file"}[case]
    with pytest.raises(SystemExit, match=expected):
        main(["encode-dir", str(images), "-o", str(out)])


@pytest.mark.parametrize("address, expected", [("127.0.0.1:1", "cannot reach the Ray cluster at 127.0.0.1:1"),
                                               ("head-node", "'head-node' is not an address")])
def test_a_wrong_ray_address_is_named(tmp_path, model, capsys, address, expected):
    pytest.importorskip("ray")
    images = make_images(tmp_path / "images")
    with pytest.raises(SystemExit) as exit_:
        main(["encode-dir", str(images), "-o", str(tmp_path / "emb"), "-m", str(model), "--ray", address])
    assert exit_.value.code == 1 and expected in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")     # Ray Data's own settings
def test_an_actor_that_cannot_start_stops_the_job_with_its_cause(tmp_path, ray_address):
    """An encoder actor failing in its constructor (its node lacks the model) ends the stream with a JobError."""
    from ggpy.models.mobilesam.jobs.batch import JobError
    from ggpy.models.mobilesam.jobs.encode_dir_ray import stream_on_ray
    images = make_images(tmp_path / "images")
    settings = {"model": str(tmp_path / "elsewhere.gguf"), "out_dir": str(tmp_path / "emb"), "backend": "cpu",
                "threads": 1, "dtype": "f32", "batch": 1}
    prep = {"image_size": 1024, "pixel_mean": [0.0] * 3, "pixel_std": [1.0] * 3}
    with pytest.raises(JobError, match="ModelFileError: model file .*elsewhere.gguf does not exist"):
        list(stream_on_ray([{"image": "a.png", "path": str(images / "a.png")}], settings, prep, ray_address))


def test_more_threads_than_a_node_has_is_refused(tmp_path, ray_address):
    from ggpy.models.mobilesam.jobs.batch import JobError
    from ggpy.models.mobilesam.jobs.encode_dir_ray import stream_on_ray
    settings = {"model": "unused.gguf", "out_dir": str(tmp_path), "backend": "cpu", "threads": 3, "dtype": "f32",
                "batch": 1}
    with pytest.raises(JobError, match=r"-t 3: no node of the Ray cluster has 3 CPUs \(its nodes have \[2\]\)"):
        stream_on_ray([{"image": "a.png", "path": "a.png"}], settings, {}, ray_address)


def cuda_works() -> bool:
    from ggpy.backends import make_backend
    try:
        make_backend("cuda", None)
    except Exception:  # noqa: BLE001 - no cuda-python, no driver or no GPU: all mean no CUDA here
        return False
    return True


def test_cuda_actor_takes_the_gpu(tmp_path, model, references, ray_address):
    """-b cuda --ray: one actor with num_gpus=1 on the declared GPU. With CUDA it encodes like the CPU; without, its
    backend fails in the actor and the job stops naming that cause."""
    images, out = make_images(tmp_path / "images"), tmp_path / "emb"
    proc = cli(images, "-o", out, "-m", model, "-b", "cuda", "--batch", "2", "--ray", ray_address)
    stdout, stderr = proc.communicate(timeout=600)
    if cuda_works():
        assert proc.returncode == 0, stderr
        for name, ref in references.items():
            assert np.abs(np.load(out / (name + ".npy")) - ref).max() <= 1e-3 * np.abs(ref).max(), name
    else:
        assert proc.returncode == 1 and re.search(r"error: the Ray job stopped: .*cuda", stderr, re.I), stderr
        assert "0 encoded" in stdout.strip().splitlines()[-1]


def test_a_write_killed_midway_leaves_no_embedding_and_its_temporary_is_removed(tmp_path):
    """SIGKILL while an embedding is being written (np.save made to stop half-way): no <image>.npy, and the next
    run's listing deletes the temporary."""
    from ggpy.models.mobilesam.jobs.encode_dir import existing_outputs
    script = """if True:
        import sys, time, numpy as np
        from pathlib import Path
        from ggpy.models.mobilesam.jobs import batch
        def half(f, a):
            f.write(b"half an embedding")
            f.flush()
            time.sleep(600)
        batch.np.save = half
        batch.save_npy_atomic(Path(sys.argv[1]), np.zeros((1, 256, 64, 64), np.float32))
    """
    target = tmp_path / "sub" / "a.png.npy"
    proc = subprocess.Popen([sys.executable, "-c", script, str(target)], cwd=ROOT)
    t0 = time.monotonic()
    while not list(tmp_path.rglob(".a.png.npy.*.tmp")):
        assert proc.poll() is None and time.monotonic() - t0 < 120
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert not target.exists() and len(list(tmp_path.rglob("*.tmp"))) == 1
    assert existing_outputs(tmp_path) == set() and not list(tmp_path.rglob("*.tmp"))
