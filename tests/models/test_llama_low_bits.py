"""Files quantized by llama.cpp itself (llama_model_quantize) to Q2_K, Q3_K_M, IQ4_NL and IQ4_XS from a random F32
llama GGUF: ggpy loads and runs them, its logits equal to the float64 reference forward on the same file (weights
dequantized by gguf.quants) and close to llama.cpp's, no further than llama.cpp's from the F32 file's logits.
Skipped without llama-cpp-python.

Measured (12 tokens, one seed): ggpy against the reference 1.8e-4 relative error; against llama.cpp 1.2e-2 - 1.6e-2
(llama.cpp rounds the activations to 8 bits), top-1 equal at 11-12 of 12; from the F32 file's logits ggpy 0.53 /
0.26 / 0.16 / 0.17 (Q2_K / Q3_K_M / IQ4_NL / IQ4_XS), llama.cpp 0.53 / 0.26 / 0.16 / 0.17."""
import ctypes

import gguf
import numpy as np
import pytest
pytest.importorskip("tokenizers")          # the llama extra: pip install -e ".[llama]"
llama_cpp_module = pytest.importorskip("llama_cpp")

from llama_cpp_ref import llama_cpp
from llama_tiny import write_tiny_llama

from ggpy.models.llama.gguf_file import open_llama
from ggpy.models.llama.reference import ReferenceModel
from ggpy.models.llama.runner import GraphModel

Q = gguf.GGMLQuantizationType
SEED = int(np.random.SeedSequence().entropy % 2**32)
MATRICES = ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
FTYPES = {"Q2_K": (Q.Q2_K, Q.Q3_K), "Q3_K_M": (Q.Q3_K,), "IQ4_NL": (Q.IQ4_NL,), "IQ4_XS": (Q.IQ4_XS,)}
"""llama.cpp's file types and the tensor types each writes (besides others of its mix)."""


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory):
    """A random llama of rows of 256 (whole K-quant blocks) in F32."""
    return write_tiny_llama(tmp_path_factory.mktemp("low_bits") / "f32.gguf", seed=SEED, n_embd=256, n_ff=512,
                            types=dict.fromkeys(MATRICES, Q.F32))


def quantize(src, dst, ftype: str):
    params = llama_cpp_module.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp_module, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = 1
    assert llama_cpp_module.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) == 0
    return dst


@pytest.fixture(scope="module")
def quantized(f32_file):
    """The file of each ftype, quantized once."""
    files = {}

    def get(ftype):
        if ftype not in files:
            files[ftype] = quantize(f32_file, f32_file.with_name(f"{ftype}.gguf"), ftype)
        return files[ftype]
    return get


@pytest.mark.parametrize("ftype", list(FTYPES))
@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
def test_llama_cpp_files_run_close_to_llama_cpp(f32_file, quantized, ftype, backend_name, request):
    """CPU: the prompt at once (exact products), so ggpy is the reference to F32 rounding; CUDA: in pieces of 4 and 1
    (mmvq, which rounds the activations to 8 bits as llama.cpp does; measured on an H200: 1.1e-2 from the reference,
    1.3e-2 - 1.9e-2 from llama.cpp)."""
    backend = "cpu" if backend_name == "cpu" else request.getfixturevalue("cuda_backend")
    path = quantized(ftype)
    written = {t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert set(FTYPES[ftype]) <= written, f"{ftype}: llama.cpp wrote {sorted(t.name for t in written)}"
    ids = [int(i) for i in np.random.default_rng(SEED).integers(0, 320, 12)]
    m = open_llama(path)
    model = GraphModel(m, backend, n_threads=2)
    if backend_name == "cpu":           # 12 columns: the exact paths
        ours = model.eval(ids)
    else:                               # 4 columns, then 1 at a time: mmvq
        ours = np.concatenate([model.eval(ids[:4])] + [model.eval([t]) for t in ids[4:]])
    ref = ReferenceModel(m).eval(ids)
    llm = llama_cpp(path, n_ctx=64, logits_all=True, n_threads=2, seed=0)
    llm.eval(ids)
    cpp = np.array(llm.scores[:len(ids)], np.float64)
    dense = ReferenceModel(open_llama(f32_file)).eval(ids)
    report = (f"{ftype} (seed {SEED}): reference {rel(ours, ref):.2e}, llama.cpp {rel(ours, cpp):.2e}, from F32: ggpy "
              f"{rel(ours, dense):.3f}, llama.cpp {rel(cpp, dense):.3f}")
    assert rel(ours, ref) < (1e-3 if backend_name == "cpu" else 5e-2), report
    assert rel(ours, cpp) < 5e-2 and np.mean(ours.argmax(1) == cpp.argmax(1)) >= 0.75, report
    assert rel(ours, dense) <= 1.05 * rel(cpp, dense), report
