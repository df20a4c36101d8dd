"""Issue 33's llama side, a hostile user's inputs: every one ends in a run with finite logits or in one `error:` line
(exit 2 for a bad argument, 1 for a bad file), never a traceback, a hang or a silent NaN. The CLI runs in-process
(`cli.main(argv)`) on small files each test writes: a custom general.alignment, a data region that does not end
where the tensors say, NaN weights, a non-UTF-8 prompt, a directory / device / FIFO as the model, -c above the
training context or beyond memory, a prompt longer than the context, a temperature near 0, too many threads,
hostile chat templates; and a fuzz test of a few hundred corruptions of a small file."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"
pytest.importorskip("jinja2")

from timeouts import deadline
from llama_tiny import CHAT_TEMPLATE, write_tiny_llama

from ggpy import ModelFileError
from ggpy.models.llama import cli
from ggpy.models.llama.chat import ChatTemplateError, render_chat
from ggpy.models.llama.gguf_file import open_llama, read_gguf
from ggpy.models.llama.sampling import Sampler


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


def _nan_weights(tiny, path):
    reader, _ = read_gguf(tiny)
    rt = next(t for t in reader.tensors if t.name == "output_norm.weight")
    return patched(tiny, path, int(rt.data_offset), np.full(int(rt.n_elements), np.nan, np.float32).tobytes())


@pytest.mark.parametrize("sampling", [["--temp", 0], ["--temp", 0.8, "--seed", 1]])
def test_non_finite_logits_stop_the_run(tiny, tmp_path, capsys, sampling):
    """NaN weights used to print all-NaN logits and exit 0 at --temp 0, and end in numpy's 'Probabilities contain
    NaN' glued to the echoed text with sampling."""
    path = _nan_weights(tiny, tmp_path / "nan.gguf")
    code, out, err = run_cli(capsys, "-m", path, "-p", "the water", "-n", 3, "-t", 1, "-c", 32, *sampling)
    assert code == 1
    one_error_line(err, str(path), "logits after", "not finite")
    assert out == "the water\n"         # the echoed prompt, its line ended: no token drawn


def test_a_non_utf8_prompt_is_a_bad_argument(tiny, capsys):
    """`-p $'caf\\xe9'` arrives as 'caf\\udce9' (surrogateescape): the tokenizer raised a TypeError traceback."""
    for chat in ([], ["--chat"]):
        code, out, err = run_cli(capsys, "-m", tiny, "-p", "caf\udce9", "-n", 1, *chat)
        assert code == 2 and out == ""
        one_error_line(err, "-p/--prompt", "byte 0xe9 at character 3 is not UTF-8")


def test_a_non_utf8_prompt_from_argv_exits_2(tiny):
    """The same through a real argv (bytes decoded by Python with surrogateescape)."""
    r = subprocess.run([sys.executable, "-m", "ggpy.models.llama", "-m", str(tiny), "-p", b"caf\xe9", "-n", "1"],
                       capture_output=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 2
    one_error_line(r.stderr.decode(errors="replace"), "-p/--prompt", "0xe9")


def test_a_model_that_is_no_regular_file_is_named_and_never_blocks(tmp_path, capsys):
    """-m DIR, -m /dev/zero and -m FIFO said the file 'does not exist'; a FIFO must not block the open."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    cases = [(tmp_path, "is a directory"), (fifo, "is a FIFO"), (tmp_path / "none.gguf", "does not exist")]
    if os.path.exists("/dev/zero"):
        cases.append(("/dev/zero", "is a character device"))
    with deadline(30):
        for path, words in cases:
            code, out, err = run_cli(capsys, "-m", path, "-p", "x")
            assert code == 1, (path, err)
            one_error_line(err, f"model file {path} {words}")


def test_a_context_above_the_training_context_warns(tiny, capsys):
    """-c above the model's context_length (256 here) was accepted silently; llama.cpp warns."""
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 1, "--temp", 0, "-t", 1, "-c", 1000)
    assert code == 0, err
    warning = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and "-c 1000" in warning[0] and "256 tokens" in warning[0], err
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 1, "--temp", 0, "-t", 1, "-c", 256)
    assert code == 0 and "warning" not in err, err


def test_a_prompt_too_long_is_refused_before_the_model_is_built(tiny, capsys, monkeypatch):
    """The token count is checked first: no weights, KV cache or graphs for a prompt that cannot fit."""
    def build(*args, **kwargs):
        raise AssertionError("make_model was called for a prompt that does not fit")
    monkeypatch.setattr(cli, "make_model", build)
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the people who call the water " * 4, "-n", 4, "-c", 16)
    assert code == 1
    one_error_line(err, "prompt tokens + 4 to generate exceed the context of 16 tokens")


@pytest.mark.parametrize("name, words", [("out", "expected a file name ending in .npy"),
                                          ("folder", "is a directory"),
                                          ("missing/out.npy", "does not exist")])
def test_a_logits_path_that_cannot_be_written_is_refused_before_the_model(tiny, tmp_path, capsys, monkeypatch, name,
                                                                          words):
    """--logits out wrote out.npy (np.save adds the suffix) and said '-> out'; --logits DIR wrote DIR.npy beside the
    folder with exit 0: now both are bad arguments, found before the model is loaded."""
    (tmp_path / "folder").mkdir()

    def build(*args, **kwargs):
        raise AssertionError("make_model was called for an output that cannot be written")
    monkeypatch.setattr(cli, "make_model", build)
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 1, "--logits", tmp_path / name)
    assert code == 2
    one_error_line(err, "--logits", words)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["folder"]


def test_logits_are_written_atomically_under_the_name_given(tiny, tmp_path, capsys):
    """The file named is the file written (no suffix added, no temporary left), and it holds finite logits."""
    path = tmp_path / "logits.npy"
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 2, "--temp", 0, "--logits", path)
    assert code == 0, err
    assert f"-> {path}" in err
    assert [f.name for f in tmp_path.iterdir()] == ["logits.npy"]
    logits = np.load(path)
    assert logits.ndim == 2 and np.isfinite(logits).all()


def test_a_context_too_big_for_memory_is_a_bad_argument(tiny, capsys, monkeypatch):
    """-c 10**7 on a machine of 1 GiB (stood in): its KV cache (2.4 GiB of F16, the default; with flash attention on no
    prompt chunk's scores are counted) is refused before anything is allocated, with exit 2 (it used to try, and fail
    or swap, after minutes); without -fa a prompt chunk's attention scores (95.4 GiB) count too."""
    def build(*args, **kwargs):
        raise AssertionError("make_model was called for a context that does not fit")
    monkeypatch.setattr(cli, "make_model", build)
    monkeypatch.setattr(cli, "_memory_bytes", lambda: 2**30)
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 1, "-c", 10**7, "-fa")
    assert code == 2
    one_error_line(err, "-c/--ctx-size", "10000000 tokens needs 2.4 GiB", "1.0 GiB of memory")
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 1, "-c", 10**7)
    assert code == 2
    one_error_line(err, "-c/--ctx-size", "10000000 tokens needs 97.8 GiB", "1.0 GiB of memory")


def test_extreme_sampling_and_thread_arguments(tiny, capsys):
    """--temp 1e-320 divided the logits into inf and ended in numpy's 'Probabilities contain NaN'; now its limit,
    the largest logit (as --temp 0), and --temp inf is uniform. -t 100000 reserved 2.5 GB of per-worker scratch:
    refused as a bad argument."""
    logits = np.random.default_rng(5).standard_normal(300).astype(np.float32)
    tiny_temp = Sampler(temp=1e-320, top_k=0, top_p=1.0, seed=1)
    assert [tiny_temp(logits) for _ in range(5)] == [int(np.argmax(logits))] * 5
    ids, p = Sampler(temp=float("inf"), top_k=0, top_p=1.0).candidates(logits)
    np.testing.assert_allclose(p, np.full(300, 1 / 300))
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "the water", "-n", 2, "-t", 1, "-c", 32, "--temp", 1e-320)
    assert code == 0, err
    code, out, err = run_cli(capsys, "-m", tiny, "-p", "x", "-t", 100000)
    assert code == 2
    one_error_line(err, "-t/--threads", "100000 is above 1024")


HOSTILE_TEMPLATES = [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{{ range(3)|tojson }}", "TypeError"),
    ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
    ("{{ range(1000000)|length }}", "OverflowError: Range too big"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "ran past 3 s"),
    ("{{ 'x' * 6000000000 }}", "str * int would make 6000000000 items"),
    ("{{ ([1] * 10000000)|length }}", "list * int would make 10000000 items"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "'~' would"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "str + str"),
    ("{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}", "int * int"),
    ("{{ 10 ** (10 ** 10) }}", "int ** int would make an integer"),
    ("{{ 'x'|center(6000000000) }}", "the filter center was given 6000000000"),
    ("{{ 'x'.ljust(6000000000) }}", "the call of ljust was given 6000000000"),
    ("{{ '{:>3000000000}'.format(1) }}", "width of a million or more"),
    ("{{ '%3000000000d' % 1 }}", "width of a million or more"),
    ("{{ (['x' * 4000000] * 1000)|join }}", "the filter join would make 4000000000 characters"),
    ("{{ ''.join(['x' * 4000000] * 1000) }}", "the call of join would make 4000000000 characters"),
    ("{{ 'ab'.replace('', 'x' * 4000000) }}", "the call of replace would make"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "the output passed"),
    ("{{ messages.__class__.__mro__ }}", "SecurityError"),          # the sandbox's own refusal, as before
]


@pytest.mark.parametrize("template,words", HOSTILE_TEMPLATES, ids=[words for _, words in HOSTILE_TEMPLATES])
def test_a_hostile_chat_template_fails_in_bounded_time_and_size(template, words):
    """Exceptions other than jinja2's TemplateError leaked as tracebacks; nested range(100000) loops ran for minutes;
    'x' * 6000000000 allocated 6 GB. Each is now a ChatTemplateError, within a few seconds (and no big allocation:
    the sizes are refused before they are made)."""
    with deadline(15), pytest.raises(ChatTemplateError) as e:
        render_chat(template, [{"role": "user", "content": "hi"}])
    assert str(e.value).startswith("the chat template failed: ") and words in str(e.value), str(e.value)


REAL_TEMPLATES = [
    CHAT_TEMPLATE,
    "{{ bos_token }}{% for m in messages %}{% if loop.first and m['role'] != 'system' %}{{ '<|system|>\\nHelp.\\n' }}"
    "{% endif %}{{ '<|' + m['role'] + '|>\\n' + m['content'] | trim + eos_token + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
    "{% set ns = namespace(n=0, text='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.text = ns.text ~ m.content ~ ' ' %}{% endfor %}{{ ns.n }} {{ ns.text * 2 }}{{ messages | tojson }}"
    "{{ '%-5s|' % 'ab' }}{{ '{:>4}'.format(7) }}{{ (messages|map(attribute='role')|join(', '))|upper }}"
    "{{ 2 ** 10 }}{{ range(3)|list }}{{ 'x'|center(9) }}",
    "{% autoescape true %}{% for m in messages %}{{ '<' ~ m.role ~ '>' }}{{ m.content ~ '&' }}{{ ('<b>'|safe) ~ m.content }}{% endfor %}"
    "{% endautoescape %}{{ '<' ~ messages[0].content }}",
]


@pytest.mark.parametrize("template", REAL_TEMPLATES)
def test_the_bounded_sandbox_renders_as_jinja2s(template):
    """What real templates use renders as jinja2's own immutable sandbox renders it."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    messages = [{"role": "user", "content": "  café 🙂 "}, {"role": "assistant", "content": "ok"}]
    expected = env.from_string(template).render(messages=messages, bos_token="<s>", eos_token="</s>",
                                                 add_generation_prompt=True)
    assert render_chat(template, messages, "<s>", "</s>") == expected


def test_a_failing_chat_template_is_one_error_line(tmp_path, capsys):
    path = write_tiny_llama(tmp_path / "t.gguf", metadata={"tokenizer.chat_template": "{{ 'x' * 6000000000 }}"})
    code, out, err = run_cli(capsys, "-m", path, "-p", "hi", "--chat", "-n", 1)
    assert code == 1
    one_error_line(err, "error: the chat template failed: ", "6000000000", str(path))


def _corruptions(blob: bytes, reader, rng) -> list:
    """(description, bytes) of a few hundred seeded corruptions of `blob`: truncations, byte flips in the header, the
    metadata and the tensor table, bad general.alignment values, tensor and key counts, tensor offsets, extra bytes."""
    ti_start, data_start = reader.tensors[0].field.offset, int(reader.data_offset)

    def at(offset, data):
        b = bytearray(blob)
        b[offset:offset + len(data)] = data
        return bytes(b)

    def flips(lo, hi):
        b = bytearray(blob)
        for pos in rng.integers(lo, hi, rng.integers(1, 4)):
            b[pos] ^= int(rng.integers(1, 256))
        return bytes(b)

    cases = [(f"cut at {n}", blob[:n]) for n in rng.integers(0, len(blob), 60)]
    cases += [(f"header flip {i}", flips(0, 24)) for i in range(30)]
    cases += [(f"metadata flip {i}", flips(24, ti_start)) for i in range(80)]
    cases += [(f"tensor table flip {i}", flips(ti_start, data_start)) for i in range(80)]
    align = reader.fields["general.alignment"].parts[-1].ctypes.data - reader.data.ctypes.data
    cases += [(f"alignment {a}", at(align, np.uint32(a).tobytes())) for a in (0, 1, 3, 16, 31, 64, 1 << 31, 2**32 - 1)]
    n, k = len(reader.tensors), len(reader.fields) - 3        # fields: GGUF.version, tensor_count, kv_count too
    cases += [(f"tensor count {c}", at(8, np.uint64(c).tobytes())) for c in (0, 1, n - 1, n + 1, 2**32, 2**64 - 1)]
    cases += [(f"key count {c}", at(16, np.uint64(c).tobytes())) for c in (0, k - 1, k + 1, 2**40, 2**64 - 1)]
    for i in rng.integers(0, n, 12):
        rt = reader.tensors[i]
        field = rt.field.parts[5].ctypes.data - reader.data.ctypes.data
        delta = int(rng.choice([1, -1, 31, 32, -32, 2**40]))
        cases.append((f"'{rt.name}' offset {delta:+}",
                      at(field, np.uint64((int(rt.field.parts[5][0]) + delta) % 2**64).tobytes())))
    cases += [(f"{m} extra bytes", blob + rng.bytes(m)) for m in (1, 31, 32, 100)]
    return cases


def test_fuzz_corrupt_files_end_in_finite_logits_or_one_error_line(tmp_path, capsys):
    """Every corruption, run through the CLI in-process, ends in a run with finite logits (exit 0) or one `error:`
    line (exit 1, or 2), within a few seconds each; nothing else (a traceback fails the test with the case)."""
    path = write_tiny_llama(tmp_path / "small.gguf", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, n_ctx=64,
                            alignment=32)
    reader, _ = read_gguf(path)
    cases = _corruptions(path.read_bytes(), reader, np.random.default_rng(33))
    assert len(cases) >= 250
    bad, logits, outcomes = tmp_path / "bad.gguf", tmp_path / "logits.npy", {}
    for what, blob in cases:
        bad.write_bytes(blob)
        logits.unlink(missing_ok=True)
        try:
            with deadline(20):
                code, out, err = run_cli(capsys, "-m", bad, "-p", "the water", "-n", 2, "--temp", 0, "-t", 1,
                                         "-c", 16, "--logits", logits)
        except BaseException as e:      # noqa: BLE001 - any escape is the failure to report, with its case
            pytest.fail(f"{what}: {type(e).__name__}: {e}")
        if code == 0:
            assert np.isfinite(np.load(logits)).all(), what
        else:
            assert code in (1, 2), (what, code, err)
            one_error_line(err)
        outcomes[code] = outcomes.get(code, 0) + 1
    assert outcomes.get(1, 0) > len(cases) // 2, outcomes        # most corruptions are refused
