"""Issue 33's llama side, a hostile user's inputs: every one ends in a run with finite logits or in one `error:` line
(exit 2 for a bad argument, 1 for a bad file), never a traceback, a hang or a silent NaN. The CLI runs in-process
(`cli.main(argv)`) on small files each test writes: a custom general.alignment, a data region that does not end
where the tensors say."""

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"
pytest.importorskip("jinja2")

from llama_tiny import write_tiny_llama

from ggpy import ModelFileError
from ggpy.models.llama import cli
from ggpy.models.llama.gguf_file import open_llama, read_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("bad") / "tiny.gguf", seed=3)


def run_cli(capsys, *args) -> tuple:
    """(exit status, stdout, stderr) of `ggpy-llama args` run in-process."""
    capsys.readouterr()
    try:
        cli.main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    if isinstance(code, str):           # sys.exit("error: ...") prints it and exits 1
        err, code = err + code + "\n", 1
    return code or 0, out, err


def one_error_line(err: str, *words) -> str:
    """The stderr's `error:` line, asserting there is exactly one, no traceback, and that it names `words`."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if "error: " in line]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1], err
    for w in words:
        assert w in errors[0], f"{w!r} not in {errors[0]!r}"
    return errors[0]


def patched(src, dst, offset: int, data: bytes):
    blob = bytearray(src.read_bytes())
    blob[offset:offset + len(data)] = data
    dst.write_bytes(bytes(blob))
    return dst


def test_a_custom_alignment_loads_and_runs(tmp_path, capsys):
    """gguf's add_custom_alignment writes general.alignment as a uint32: the layout check used it as a numpy uint32
    and overflowed (OverflowError: Python integer -21760 out of bounds for uint32)."""
    for alignment in (32, 64):
        path = write_tiny_llama(tmp_path / f"a{alignment}.gguf", alignment=alignment)
        reader, metadata = read_gguf(path)
        assert metadata["general.alignment"] == alignment and int(reader.alignment) == alignment
        assert open_llama(path).hparams.n_layer == 2
        code, out, err = run_cli(capsys, "-m", path, "-p", "the water", "-n", 2, "--temp", 0, "-t", 1, "-c", 32,
                                 "--logits", tmp_path / f"l{alignment}.npy")
        assert code == 0, err
        assert np.isfinite(np.load(tmp_path / f"l{alignment}.npy")).all()


def _tensor_count_short(tiny, path):
    n = len(read_gguf(tiny)[0].tensors)
    return patched(tiny, path, 8, np.uint64(n - 1).tobytes())       # magic, version, then the tensor count


def _trailing_bytes(tiny, path):
    path.write_bytes(tiny.read_bytes() + bytes(64))
    return path


def _offset_off_by_one(tiny, path):
    reader, _ = read_gguf(tiny)
    rt = next(t for t in reader.tensors if t.name == "blk.1.attn_norm.weight")
    where = rt.field.parts[5].ctypes.data - reader.data.ctypes.data
    return patched(tiny, path, where, np.uint64(int(rt.field.parts[5][0]) + 1).tobytes())


@pytest.mark.parametrize("corrupt,words", [
    (_tensor_count_short, ["tensors end at byte", "bytes are no tensor's", "tensor count"]),
    (_trailing_bytes, ["tensors end at byte", "64 bytes are no tensor's"]),
    (_offset_off_by_one, ["'blk.1.attn_norm.weight' starts at byte", "expected"]),
])
def test_a_data_region_that_does_not_end_with_the_tensors_is_refused(tiny, tmp_path, capsys, corrupt, words):
    """A tensor count one short used to load (the last tensor dropped, the others read off by the size of its
    entry, the trailing bytes unused) and compute NaN; trailing bytes were ignored."""
    path = corrupt(tiny, tmp_path / "bad.gguf")
    with pytest.raises(ModelFileError) as e:
        open_llama(path)
    for w in words:
        assert w in str(e.value), str(e.value)
    code, out, err = run_cli(capsys, "-m", path, "-p", "x", "-n", 1, "--temp", 0)
    assert code == 1
    one_error_line(err, str(path), *words)
