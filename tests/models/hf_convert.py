"""Tiny random Hugging Face models converted to GGUF by llama.cpp's own convert_hf_to_gguf.py.

The converter is found as: $GGPY_LLAMA_CPP_SRC (a llama.cpp checkout: convert_hf_to_gguf.py, conversion/, gguf-py/),
else an extract cached under ~/.cache/ggpy/llama.cpp-convert-<version>, made from llama-cpp-python's source
distribution ($GGPY_LLAMA_CPP_SDIST, else llama_cpp_python-*.tar.gz under ~/.cache/ggpy or /tmp/pd; CI downloads
it with `pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36`); else the tests skip. It runs as a
subprocess with its own gguf-py. Two things are adapted, neither about the architecture: the tiny models' trained
byte-level BPE is declared SmolLM's pre-tokenizer (the converter recognises pre-tokenizers by a hash of known
vocabularies'), and Gemma 2 / Phi-3, whose converters read a SentencePiece tokenizer.model, read that BPE too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest

CACHE = Path.home() / ".cache" / "ggpy"
NEEDED = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
DRIVER = """
import runpy, sys
src, jobs = sys.argv[1], sys.argv[2:]
sys.path.insert(0, src)
import conversion.base as base
from conversion import gemma, phi
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "smollm"
gemma.Gemma2Model.set_vocab = phi.Phi3MiniModel.set_vocab = base.TextModel._set_vocab_gpt2
for model_dir, out, outtype in zip(jobs[::3], jobs[1::3], jobs[2::3]):
    sys.argv = [src + "/convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", outtype]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _sdist() -> Path | None:
    if os.environ.get("GGPY_LLAMA_CPP_SDIST"):
        return Path(os.environ["GGPY_LLAMA_CPP_SDIST"])
    found = sorted(CACHE.glob("llama_cpp_python-*.tar.gz")) + sorted(Path("/tmp/pd").glob("llama_cpp_python-*.tar.gz"))
    return found[-1] if found else None


def _extract(sdist: Path) -> Path:
    """The converter's files of `sdist` under CACHE (extracted once, into a folder of this process that is then
    renamed: pytest-xdist workers may extract at once; a finished extract holds a marker)."""
    version = sdist.name.removeprefix("llama_cpp_python-").removesuffix(".tar.gz")
    done = CACHE / f"llama.cpp-convert-{version}"
    if (done / ".done").exists():
        return done
    out = CACHE / f"llama.cpp-convert-{version}.{os.getpid()}"
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name.removeprefix(prefix)
            if m.name.startswith(prefix) and rel.startswith(NEEDED) and m.isfile():
                m.name = rel
                members.append(m)
        tar.extractall(out, members=members, filter="data")
    (out / ".done").touch()
    if done.exists() and not (done / ".done").exists():
        shutil.rmtree(done, ignore_errors=True)     # an interrupted extract of an older version of this function
    try:
        out.rename(done)
    except OSError:                                 # another process's extract is there now
        shutil.rmtree(out, ignore_errors=True)
    return done


def converter_src() -> Path:
    """The llama.cpp source folder holding convert_hf_to_gguf.py; pytest.skip where there is none."""
    if os.environ.get("GGPY_LLAMA_CPP_SRC"):
        src = Path(os.environ["GGPY_LLAMA_CPP_SRC"])
    else:
        sdist = _sdist()
        if sdist is None or not sdist.exists():
            pytest.skip("llama.cpp's convert_hf_to_gguf.py: set GGPY_LLAMA_CPP_SRC, or put llama-cpp-python's sdist "
                        "under ~/.cache/ggpy (pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36)")
        src = _extract(sdist)
    if not (src / "convert_hf_to_gguf.py").exists():
        pytest.skip(f"no convert_hf_to_gguf.py in {src}")
    return src


def convert(jobs: dict) -> dict:
    """Convert Hugging Face models: jobs {(model_dir, outtype): GGUF path} (outtype f32, f16, bf16 or q8_0), all in
    one process (the converter's imports once); returns jobs."""
    src = converter_src()
    env = {**os.environ, "PYTHONPATH": f"{src / 'gguf-py'}{os.pathsep}{src}"}
    env.pop("NO_LOCAL_GGUF", None)
    args = [str(a) for (d, t), p in jobs.items() for a in (d, p, t)]
    run = subprocess.run([sys.executable, "-c", DRIVER, str(src), *args], env=env, capture_output=True, text=True,
                         timeout=900)
    if run.returncode:
        raise RuntimeError(f"convert_hf_to_gguf.py failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return jobs


def with_metadata(src: Path, dst: Path, extra: dict) -> Path:
    """A copy of the GGUF `src` at `dst` with the uint32 keys of `extra` added (a key the converter does not write,
    e.g. Mistral's sliding window), tensors and every other key as they were."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if not name.startswith("GGUF.") and name != "general.architecture":
            sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(name, f.contents(), f.types[0], sub)
    for k, v in extra.items():
        w.add_uint32(k, v)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)     # data: numpy shape reversed(ne), or bytes per row
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@contextmanager
def real_torchvision_only():
    """Hide the MobileSAM tests' torchvision stand-in (conftest installs it in sys.modules), which transformers
    would take for torchvision and fail to import from."""
    stubs = {k: m for k, m in sys.modules.items()
             if k.split(".")[0] == "torchvision" and getattr(m, "__file__", None) is None}
    for k in stubs:
        del sys.modules[k]
    try:
        yield
    finally:
        sys.modules.update(stubs)


def save_tiny(model_dir: Path, config_cls: str, model_cls: str, seed: int, **config):
    """A random transformers model `model_cls` of config `config_cls`(**config), every weight random (norms too:
    1 + N(0, 0.3), or N(0, 0.3) where the config's norm adds the 1 itself: Gemma's), saved with the tiny byte-level
    BPE tokenizer; returns the model (float32, eval mode)."""
    torch = pytest.importorskip("torch")
    with real_torchvision_only():
        transformers = pytest.importorskip("transformers")
        from llama_tiny import SPECIAL, tiny_tokenizer
        torch.manual_seed(seed)
        config = {"vocab_size": 320, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0,
                  "tie_word_embeddings": False, **config}
        cfg = getattr(transformers, config_cls)(**config)
        model = getattr(transformers, model_cls)(cfg).float().eval()
        gemma = config_cls.startswith("Gemma")
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(torch.randn_like(p) * 0.3 + (0.0 if gemma else 1.0))
                elif name.endswith("bias"):
                    p.copy_(torch.randn_like(p) * 0.1)
        model.save_pretrained(model_dir)
        tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tiny_tokenizer(), bos_token=SPECIAL[0],
                                                   eos_token=SPECIAL[0])
        tok.save_pretrained(model_dir)
    return model


def hf_logits(model, ids: list):
    """transformers' float32 logits (len(ids), n_vocab) of `ids` read at once."""
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()
