"""The llama runner on CUDA (ggpy.models.llama with -b cuda): quantized weights on the GPU (the dot-product kernel for
single tokens, dequantized F16 GEMMs for prompt chunks), the KV cache in device memory, against the float64
reference forward on small random GGUFs (the types gguf.quants writes; the K-quants' kernels are checked by
their op cases), and the CLI. Skips without a GPU."""
import subprocess
import sys

import gguf
import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("cuda.bindings.driver")

from llama_tiny import write_tiny_llama  # noqa: E402

from ggpy.models.llama.gguf_file import open_llama  # noqa: E402
from ggpy.models.llama.reference import ReferenceModel  # noqa: E402
from ggpy.models.llama.runner import GraphModel  # noqa: E402

pytestmark = pytest.mark.usefixtures("cuda_backend")       # conftest: skips without a GPU

Q = gguf.GGMLQuantizationType
SEED = int(np.random.SeedSequence().entropy % 2**32)
CASES = {
    "llama-q4_0-q8_0": ("llama", {}),
    "qwen2-biases": ("qwen2", {}),
    "llama-tied-q4_1-q5": ("llama", {"n_embd": 96, "n_head": 6, "n_head_kv": 2, "tied": True, "n_layer": 3,
                                     "types": {"token_embd": Q.Q4_1, "attn_q": Q.Q5_0, "attn_k": Q.Q5_1,
                                               "attn_v": Q.Q4_1, "ffn_up": Q.Q5_1}}),
    "qwen2-f16": ("qwen2", {"types": {"token_embd": Q.F16, "attn_output": Q.F16, "ffn_gate": Q.F32}}),
}


@pytest.fixture(scope="module", params=list(CASES))
def tiny(request, tmp_path_factory):
    arch, kwargs = CASES[request.param]
    return write_tiny_llama(tmp_path_factory.mktemp("model") / f"{request.param}.gguf", arch=arch, seed=SEED, **kwargs)


@pytest.mark.parametrize("impl, tol", [("mmv", 3e-3), ("mmvq", 3e-2)])
def test_logits_on_cuda_equal_the_reference(tiny, impl, tol):
    """A 21-token prompt in chunks of 16 (a GEMM chunk, then 5 tokens through the dot-product kernel), then 6 tokens
    one at a time, the same ids for both: every position's logits within F16 rounding of the float64 forward with the
    exact dot-product kernel (mmv) forced where it fits, within ~1% with the integer one (mmvq, the default:
    activations rounded to 8 bits, as llama.cpp's), the same top token wherever the reference's margin is clear."""
    from ggpy.backends.cuda import CUDABackend
    m = open_llama(tiny)
    rng = np.random.default_rng(SEED)
    ids = [int(i) for i in rng.integers(0, m.hparams.n_vocab, 27)]
    model = GraphModel(m, CUDABackend("cuda", force={"mul_mat": (impl, "cublaslt")}), n_batch=16)
    ours = np.concatenate([model.eval(ids[:21])] + [model.eval([t]) for t in ids[21:]])
    ref = ReferenceModel(m).eval(ids)
    assert ours.shape == ref.shape == (27, m.hparams.n_vocab) and ours.dtype == np.float32
    err = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    print(f"\n{impl}: logits' relative error {err:.2e}")
    assert err < tol, f"relative error {err:.2e} (seed {SEED})"
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.05 * np.abs(ref).max()
    assert (ours.argmax(1) == ref.argmax(1))[clear].all(), f"seed {SEED}"


@pytest.mark.parametrize("cache, tol", [("f32", 1e-4), ("f16", 2e-3), ("q8_0", 2e-2)])
def test_flash_attention_on_cuda_equals_the_reference(tmp_path, cache, tol):
    """Heads of 64 (flash_attn_ext's CUDA kernels) over an F32, F16 or Q8_0 cache: a 40-token prompt in chunks of 32
    (tensor cores for F16 / Q8_0), then 4 tokens one at a time (the split-KV decode kernel), logits against the
    float64 forward (F32 weights: the attention's error alone; measured on the CPU, the cache's rounding alone gives
    ~5e-7, 1.5e-4 and 4e-3)."""
    types = dict.fromkeys(("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                           "ffn_down"), Q.F32)
    m = open_llama(write_tiny_llama(tmp_path / "hd64.gguf", seed=SEED, n_embd=256, n_head=4, n_head_kv=2, types=types))
    assert m.hparams.n_embd // m.hparams.n_head == 64
    ids = [int(i) for i in np.random.default_rng(SEED).integers(0, m.hparams.n_vocab, 44)]
    model = GraphModel(m, "cuda", n_batch=32, flash_attn="on", cache_type_k=cache, cache_type_v=cache)
    ours = np.concatenate([model.eval(ids[:40])] + [model.eval([t]) for t in ids[40:]])
    ref = ReferenceModel(m).eval(ids)
    err = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    print(f"\nflash on CUDA, {cache} cache: logits' relative error {err:.2e}")
    assert err < tol, f"relative error {err:.2e} (seed {SEED})"


def test_cli_on_cuda_matches_cpu(tmp_path):
    """`ggpy-llama -b cuda` greedy-generates the tokens the CPU run does and ends with the stats line."""
    path = write_tiny_llama(tmp_path / "tiny.gguf", seed=SEED)
    out = {}
    for backend in ("cpu", "cuda"):
        r = subprocess.run([sys.executable, "-m", "ggpy.models.llama", "-m", str(path), "-p", "the water of",
                            "-n", "8", "--temp", "0", "-b", backend, "--logits", str(tmp_path / f"{backend}.npy")],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip().splitlines()[-1].startswith("n_prompt="), r.stdout[-500:]
        out[backend] = np.load(tmp_path / f"{backend}.npy")
    assert out["cpu"].shape == out["cuda"].shape
    assert (out["cpu"].argmax(1) == out["cuda"].argmax(1)).mean() > 0.9
