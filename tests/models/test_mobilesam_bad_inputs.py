"""Issue 33, MobileSAM side: every bad input to `ggpy-sam` ends in one `error: ...` line naming the file or argument
and what was expected (exit status 2 for bad arguments, 1 for bad files), never a traceback, a hang or a silent NaN.
Crafted files are written by the tests; the model is the cached seeded random-weights GGUF (no torch)."""
import os
import signal
from pathlib import Path

import gguf
import numpy as np
import pytest
from PIL import Image

import ggpy
from ggpy.models.mobilesam import cli as cli_module
from ggpy.models.mobilesam.cli import main
from ggpy.models.mobilesam.jobs.batch import read_image
from ggpy.models.mobilesam.jobs.encode_dir import LOCK, is_embedding, lock_output, plan_job
from ggpy.models.mobilesam.model_check import check_model
from ggpy.models.mobilesam.preprocess import load_image
from ggpy.models.mobilesam.random_weights import random_model


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.fixture(scope="module")
def metadata(model):
    return check_model(model)


@pytest.fixture(autouse=True)
def no_hang():
    """Fail (instead of hanging) a test that blocks, e.g. on opening a FIFO."""
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("timed out: a bad input hung the command"))
    signal.alarm(120)
    yield
    signal.alarm(0)


def run(capsys, *args) -> tuple:
    """(exit status, stderr) of `ggpy-sam ARGS` run in this process."""
    try:
        main([str(a) for a in args])
        code, message = 0, ""
    except SystemExit as e:
        code, message = (1, e.code + "\n") if isinstance(e.code, str) else (e.code, "")
    err = capsys.readouterr().err + message
    assert "Traceback" not in err
    return code, err


def error_line(err: str) -> str:
    """The one line of `err` that holds 'error: '."""
    lines = [line for line in err.splitlines() if "error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def png(path: Path, h: int = 40, w: int = 60, seed: int = 0) -> Path:
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    return path


def write_metadata_gguf(path: Path, md: dict, tensors: dict | None = None) -> Path:
    """A GGUF of the metadata `md` (key -> Python value, as check_model returns it) and `tensors` (name -> array)."""
    w = gguf.GGUFWriter(os.fspath(path), md.get("general.architecture", "mobilesam"))
    for key, value in md.items():
        if key.startswith("general.architecture"):
            continue
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, int) and key.startswith("mobilesam."):
            w.add_uint32(key, value)
    for name, array in (tensors or {}).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- 1: decompression bombs -------------------------------------------------------------------------
def test_an_image_over_the_decompression_bomb_limit_is_unreadable_not_a_traceback(tmp_path, capsys, monkeypatch, model):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)          # 40 x 60 = 2400 pixels: more than twice the limit
    bomb = png(tmp_path / "bomb.png")
    with pytest.raises(ValueError, match=r"bomb\.png is too large to decode .*expected at most 1000 pixels"):
        load_image(bomb)
    row = read_image({"image": "bomb.png", "path": str(bomb)}, {"image_size": 1024})
    assert row["status"] == "unreadable" and "too large to decode" in row["error"]
    for command in (["encode", "-o", tmp_path / "e.npy"], ["segment", "-p", "1", "1", "-o", tmp_path / "m.png"],
                    ["everything", "-o", tmp_path / "m.json"]):
        code, err = run(capsys, command[0], "-m", model, "-i", bomb, *command[1:])
        assert code == 1 and "bomb.png is too large to decode" in error_line(err)


def test_encode_dir_records_a_bomb_unreadable_and_goes_on(tmp_path, capsys, monkeypatch, model):
    images = tmp_path / "images"
    images.mkdir()
    png(images / "a_bomb.png", 60, 60)
    png(images / "b_ok.png", 20, 20)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)          # 3600 pixels: a bomb; 400: not
    code, err = run(capsys, "encode-dir", images, "-o", tmp_path / "emb", "-m", model, "-t", "2")
    assert code == 0, err
    rows = {r["image"]: r for r in map(eval, (tmp_path / "emb" / "manifest.jsonl").read_text()
                                       .replace("null", "None").splitlines())}
    assert rows["a_bomb.png"]["status"] == "unreadable" and "too large to decode" in rows["a_bomb.png"]["error"]
    assert rows["b_ok.png"]["status"] == "ok" and np.isfinite(np.load(tmp_path / "emb" / "b_ok.png.npy")).all()


# -- 9: FIFOs and other non-regular files -----------------------------------------------------------
def test_a_fifo_named_jpg_does_not_hang_encode_or_encode_dir(tmp_path, capsys, model):
    images = tmp_path / "images"
    images.mkdir()
    os.mkfifo(images / "pipe.jpg")
    with pytest.raises(ValueError, match=r"pipe\.jpg is a FIFO \(named pipe\); expected an image file"):
        load_image(images / "pipe.jpg")
    assert read_image({"image": "pipe.jpg", "path": str(images / "pipe.jpg")}, {"image_size": 1024})["status"] == \
        "unreadable"
    code, err = run(capsys, "encode", "-m", model, "-i", images / "pipe.jpg", "-o", tmp_path / "e.npy")
    assert code == 1 and "pipe.jpg is a FIFO" in error_line(err)
    code, err = run(capsys, "encode", "-m", model, "-i", images, "-o", tmp_path / "out")
    assert code == 1 and "pipe.jpg is a FIFO" in error_line(err)
    code, err = run(capsys, "encode-dir", images, "-o", tmp_path / "emb", "-m", model)
    assert "unreadable: pipe.jpg: image" in err and "a FIFO" in err


# -- 15: 16-bit greyscale ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_16_bit_greyscale_is_scaled_to_8_bits_not_clipped(tmp_path, mode):
    values = np.linspace(0, 65535, 64 * 32).astype(np.uint16).reshape(32, 64)
    im = Image.fromarray(values) if mode == "I;16" else Image.fromarray(values.astype(np.int32), mode="I")
    path = tmp_path / ("grey.png" if mode == "I;16" else "grey.tif")    # a 16-bit PNG, a 32-bit integer TIFF
    im.save(path)
    with Image.open(path) as check:
        assert check.mode == mode
    rgb = load_image(path)
    assert rgb.shape == (32, 64, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb, np.repeat((values >> 8).astype(np.uint8)[:, :, None], 3, axis=2))


# -- 6, 10, 11: encode's outputs --------------------------------------------------------------------
def test_encode_into_a_directory_names_outputs_by_file_name_and_refuses_collisions(tmp_path, capsys, model):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    paths = [png(a / "x.jpg"), png(a / "x.png", seed=1)]
    embeddings = np.stack([np.full((256, 4, 4), i, np.float32) for i in range(2)])
    cli_module.save_embeddings(str(tmp_path / "out"), paths, embeddings)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.jpg.npy", "x.png.npy"]
    assert np.load(tmp_path / "out" / "x.png.npy")[0, 0, 0, 0] == 1
    png(b / "x.jpg")
    code, err = run(capsys, "encode", "-m", model, "-i", a / "x.jpg", "-i", b / "x.jpg", "-o", tmp_path / "o2")
    assert code == 2 and "would both be written to" in error_line(err) and "x.jpg.npy" in err


def test_encode_output_is_written_atomically_to_the_path_printed(tmp_path, monkeypatch, capsys):
    out = tmp_path / "e.npy"
    out.write_bytes(b"the previous embedding")
    real_save = np.save

    def killed(f, array):                      # dies half-way through writing
        real_save(f, array[:1])
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        cli_module.save_embeddings(str(out), [Path("x.jpg")], np.zeros((2, 256, 4, 4), np.float32))
    assert out.read_bytes() == b"the previous embedding" and sorted(os.listdir(tmp_path)) == ["e.npy"]
    monkeypatch.setattr(np, "save", real_save)
    cli_module.save_embeddings(str(out), [Path("x.jpg")], np.ones((1, 256, 4, 4), np.float32))
    assert f"-> {out}" in capsys.readouterr().out and np.load(out).shape == (1, 256, 4, 4)


def test_output_paths_are_checked_before_the_model_loads(tmp_path, capsys, model, monkeypatch):
    def no_model(*_):
        raise AssertionError("the model was loaded before the output paths were checked")
    monkeypatch.setattr(cli_module, "checked_model", no_model)
    monkeypatch.setattr(cli_module.everything, "checked_model", no_model)
    image, folder = png(tmp_path / "i.png"), tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "file").write_text("x")
    cases = [
        (["encode", "-i", image, "-o", tmp_path / "file"], "-o", "expected a .npy file name or a directory"),
        (["encode", "-i", image, "-o", folder / "x" / "e.npy"], "-o", "does not exist"),
        (["segment", "-i", image, "-p", "1", "1", "-o", tmp_path / "m.xyz"], "-o", "expected an image file name"),
        (["segment", "-i", image, "-p", "1", "1", "--composite", tmp_path / "c.txt"], "--composite", "image file"),
        (["segment", "-i", image, "-p", "1", "1", "--logits", folder], "--logits", "is a directory"),
        (["segment", "-i", image, "-p", "1", "1", "--logits", tmp_path / "lg"], "--logits", "ending in .npy"),
        (["everything", "-i", image, "-o", folder], "-o", "is a directory; expected a file name"),
        (["everything", "-i", image, "-o", tmp_path / "m.json", "--overlay", tmp_path / "o.xyz"], "--overlay",
         "expected an image file name"),
    ]
    for args, option, what in cases:
        code, err = run(capsys, *args)
        line = error_line(err)
        assert code == 2 and f" {option}" in line and what in line, (args, err)
    assert sorted(os.listdir(folder)) == []


def test_segment_logits_go_to_the_npy_path_given(tmp_path, capsys, monkeypatch):
    from test_mobilesam_segment_cli import ThreeMasks
    monkeypatch.setattr(cli_module, "Predictor", ThreeMasks)
    monkeypatch.setattr(cli_module, "checked_model", lambda model, _: (model, {"mobilesam.image_size": 1024}))
    logits = tmp_path / "lg.npy"
    code, err = run(capsys, "segment", "-i", png(tmp_path / "i.png", 120, 160), "-p", "5", "5",
                    "-o", tmp_path / "m.png", "--logits", logits)
    assert code == 0, err and np.load(logits).shape == (1, 3, 256, 256)
    assert sorted(os.listdir(tmp_path)) == ["i.png", "lg.npy", "m.png"]


# -- 13: misleading messages ------------------------------------------------------------------------
def test_a_thin_image_names_the_file_and_its_resized_size(tmp_path, capsys, model):
    thin = png(tmp_path / "thin.png", 1, 10000)
    with pytest.raises(ValueError, match=r"thin\.png is 10000x1: resized to 1024 pixels on its longest side it "
                                         r"would be 1024x0"):
        load_image(thin, 1024)
    assert read_image({"image": "thin.png", "path": str(thin)}, {"image_size": 1024})["status"] == "unreadable"
    code, err = run(capsys, "everything", "-m", model, "-i", thin, "-o", tmp_path / "m.json")
    assert code == 1 and "thin.png is 10000x1" in error_line(err) and error_line(err).startswith("error: ")


def test_encode_refuses_a_negative_bench_at_parsing(tmp_path, capsys):
    code, err = run(capsys, "encode", "--bench", "-1", "-o", tmp_path / "e.npy")
    assert code == 2 and "argument --bench: expected a whole number >= 0, got '-1'" in error_line(err)


@pytest.mark.parametrize("kind", ["directory", "device", "fifo"])
def test_a_model_that_is_no_file_is_named_for_what_it_is(tmp_path, capsys, kind):
    path = {"directory": tmp_path, "device": Path("/dev/zero"), "fifo": tmp_path / "m.gguf"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    expected = {"directory": "a directory", "device": "a character device", "fifo": "a FIFO (named pipe)"}[kind]
    image = png(tmp_path / "i.png")
    for command in (["encode", "-o", tmp_path / "e.npy"], ["everything", "-o", tmp_path / "m.json"]):
        code, err = run(capsys, command[0], "-m", path, "-i", image, *command[1:])
        line = error_line(err)
        assert code == 1 and f"model file {path} is {expected}; expected a GGUF file" in line, err


# -- 14: unused tensors, lots of work ---------------------------------------------------------------
def test_a_tensor_the_architecture_does_not_use_is_refused_before_allocating(tmp_path, metadata):
    path = write_metadata_gguf(tmp_path / "extra.gguf", metadata, {"extra.weight": np.zeros((4, 8), np.float32)})
    with pytest.raises(ggpy.ModelFileError, match=r"extra\.gguf has a tensor 'extra\.weight' \(ne \(8, 4\)\) that "
                                                  r"MobileSAM does not use"):
        check_model(path)
    w = gguf.GGUFWriter(os.fspath(tmp_path / "huge.gguf"), "mobilesam")    # 5e9 elements announced, none stored
    w.add_tensor_info("extra.weight", (50000, 100000), np.dtype(np.float32), 20_000_000_000)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with pytest.raises(ggpy.ModelFileError, match=r"huge\.gguf"):
        check_model(tmp_path / "huge.gguf")


def test_a_dense_grid_or_many_crop_layers_print_a_warning(tmp_path, capsys):
    for args, points in ((["--points-per-side", "1000"], "1,000,000"), (["--crop-n-layers", "5"], "1,397,760")):
        code, err = run(capsys, "everything", "-m", tmp_path, "-i", png(tmp_path / "i.png"),
                        "-o", tmp_path / "m.json", *args)
        assert code == 1 and "warning: --points-per-side" in err and f"decodes {points} prompt points" in err
    code, err = run(capsys, "everything", "-m", tmp_path, "-i", tmp_path / "i.png", "-o", tmp_path / "m.json")
    assert "warning" not in err


# -- 5: metadata -------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, value, expected", [
    ("pixel_mean", None, "mobilesam.pixel_mean is '<missing>'; expected a list of 3 finite numbers"),
    ("embed_dims", 64, "mobilesam.embed_dims is 64; expected a list of 4 positive whole numbers"),
    ("embed_dims", [64, 128], "mobilesam.embed_dims is [64, 128]; expected a list of 4 positive whole numbers"),
    ("pixel_mean", [1.0, 2.0], "mobilesam.pixel_mean is [1.0, 2.0]; expected a list of 3 finite numbers"),
    ("num_heads", [2, 4, 0, 10], "mobilesam.num_heads is [2, 4, 0, 10]; expected a list of 4 positive whole"),
    ("image_size", "big", "mobilesam.image_size is 'big'; expected a whole number of pixels from 16 to 4096"),
    ("pixel_std", [58.0, 0.0, 57.0], "mobilesam.pixel_std is [58.0, 0.0, 57.0]; expected 3 positive numbers"),
    ("neck_dim", 255, "mobilesam.neck_dim is 255; expected 256 (MobileSAM's architecture)"),
    ("mlp_ratio", float("nan"), "mobilesam.mlp_ratio is nan; expected a positive number"),
])
def test_bad_metadata_is_one_error_naming_the_file_and_the_key(tmp_path, capsys, metadata, key, value, expected):
    md = {k: v for k, v in metadata.items() if k != f"mobilesam.{key}"}
    if value is not None:
        md[f"mobilesam.{key}"] = value
    path = write_metadata_gguf(tmp_path / "bad.gguf", md)
    code, err = run(capsys, "encode", "-m", path, "-o", tmp_path / "e.npy")
    line = error_line(err)
    assert code == 1 and line.startswith(f"error: {path}: metadata ") and expected in line, err


def test_the_metadata_of_a_converted_file_passes_and_a_file_without_tensors_does_not(tmp_path, metadata):
    with pytest.raises(ggpy.ModelFileError, match=r"empty\.gguf lacks 327 of MobileSAM's tensors"):
        check_model(write_metadata_gguf(tmp_path / "empty.gguf", metadata))


# -- 4: the data region ------------------------------------------------------------------------------
def test_a_tensor_offset_off_by_one_byte_is_refused(tmp_path, model):
    reader = gguf.GGUFReader(model)
    blob = bytearray(Path(model).read_bytes())
    parts = reader.tensors[5].field.parts         # name length, name, n_dims, dims, type, offset
    offset_at = int(reader.tensors[5].field.offset) + sum(p.nbytes for p in parts[:5])
    assert int.from_bytes(blob[offset_at:offset_at + 8], "little") == int(parts[5][0])
    blob[offset_at:offset_at + 8] = (int(parts[5][0]) + 1).to_bytes(8, "little")
    (tmp_path / "off.gguf").write_bytes(bytes(blob))
    with pytest.raises(ggpy.ModelFileError, match=r"off\.gguf: tensor '.*' starts at byte"):
        check_model(tmp_path / "off.gguf")


# -- 16: encode-dir's existing outputs and its lock -------------------------------------------------
def test_encode_dir_reencodes_an_npy_that_is_no_embedding(tmp_path):
    images, out = tmp_path / "images", tmp_path / "emb"
    images.mkdir(), out.mkdir()
    for name in ("empty", "garbage", "short", "wrong", "good"):
        png(images / f"{name}.png")
    (out / "empty.png.npy").write_bytes(b"")
    (out / "garbage.png.npy").write_bytes(b"\x93NUMPY garbage" * 10)
    np.save(out / "wrong.png.npy", np.zeros((1, 3, 64, 64), np.float32))
    np.save(out / "good.png.npy", np.zeros((1, 256, 64, 64), np.float32))
    np.save(out / "short.png.npy", np.zeros((1, 256, 64, 64), np.float32))
    os.truncate(out / "short.png.npy", os.path.getsize(out / "good.png.npy") - 4)
    assert is_embedding(out / "good.png.npy") and not is_embedding(out / "short.png.npy")
    lock, _, todo, before = plan_job(images, out)
    os.close(lock)
    assert todo == ["empty.png", "garbage.png", "short.png", "wrong.png"] and before["ok"] == 1


def test_a_second_encode_dir_job_on_the_same_embeddings_stops_naming_the_lock(tmp_path, capsys, model):
    images, out = tmp_path / "images", tmp_path / "emb"
    images.mkdir(), out.mkdir()
    png(images / "a.png")
    fd = lock_output(out)                                  # another job's lock (flock: per open file, as a process)
    try:
        code, err = run(capsys, "encode-dir", images, "-o", out, "-m", model)
    finally:
        os.close(fd)
    assert code == 1 and f"another encode-dir job is writing to {out} (it holds {out / LOCK})" in error_line(err)
    assert not (out / "a.png.npy").exists()


# -- no silent NaN -----------------------------------------------------------------------------------
def test_weights_that_compute_nan_end_in_an_error_not_an_embedding(tmp_path, capsys, model):
    reader = gguf.GGUFReader(model)
    bias = next(rt for rt in reader.tensors if rt.name == "image_encoder.neck.3.bias")
    blob = bytearray(Path(model).read_bytes())
    blob[int(bias.data_offset):int(bias.data_offset) + 4] = np.float32(np.nan).tobytes()
    (tmp_path / "nan.gguf").write_bytes(bytes(blob))
    code, err = run(capsys, "encode", "-m", tmp_path / "nan.gguf", "-i", png(tmp_path / "i.png"), "-o",
                    tmp_path / "e.npy", "-t", "2")
    line = error_line(err)
    assert code == 1 and "is not finite" in line and "nan.gguf" in line and not (tmp_path / "e.npy").exists()


def test_segment_refuses_nan_scores(tmp_path, capsys, monkeypatch):
    from test_mobilesam_segment_cli import ThreeMasks
    monkeypatch.setattr(ThreeMasks, "IOU", np.array([0.2, np.nan, 0.5], np.float32))
    monkeypatch.setattr(cli_module, "Predictor", ThreeMasks)
    monkeypatch.setattr(cli_module, "checked_model", lambda model, _: (model, {"mobilesam.image_size": 1024}))
    code, err = run(capsys, "segment", "-i", png(tmp_path / "i.png", 120, 160), "-p", "5", "5",
                    "-o", tmp_path / "m.png")
    assert code == 1 and "the IoU scores computed with" in error_line(err) and not (tmp_path / "m.png").exists()


def test_a_corrupt_metadata_array_count_is_refused_at_once(tmp_path, model):
    """The gguf reader parses an array item by item: a count of 10 million that fits the file took minutes."""
    import time
    reader = gguf.GGUFReader(model)
    field = reader.fields["mobilesam.embed_dims"]
    count_at = int(field.offset) + sum(p.nbytes for p in field.parts[:4])          # key length, key, type, item type
    blob = bytearray(Path(model).read_bytes())
    assert int.from_bytes(blob[count_at:count_at + 8], "little") == 4
    blob[count_at:count_at + 8] = (10_000_000).to_bytes(8, "little")
    (tmp_path / "count.gguf").write_bytes(bytes(blob))
    t0 = time.perf_counter()
    with pytest.raises(ggpy.ModelFileError, match=r"count\.gguf: metadata 'mobilesam\.embed_dims' is an array of "
                                                  r"10000000 items; expected at most 64"):
        check_model(tmp_path / "count.gguf")
    assert time.perf_counter() - t0 < 5


def test_the_library_encoder_checks_the_file_before_allocating(tmp_path, metadata):
    from ggpy.models.mobilesam.runner import ImageEncoder
    md = dict(metadata, **{"mobilesam.pixel_std": [58.0, 0.0, 57.0]})
    with pytest.raises(ggpy.ModelFileError, match=r"std\.gguf: metadata mobilesam\.pixel_std .*expected 3 positive"):
        ImageEncoder(write_metadata_gguf(tmp_path / "std.gguf", md))
    extra = write_metadata_gguf(tmp_path / "extra.gguf", metadata, {"extra.weight": np.zeros((4, 8), np.float32)})
    with pytest.raises(ggpy.ModelFileError, match=r"extra\.gguf has a tensor 'extra\.weight'"):
        ImageEncoder(extra)
