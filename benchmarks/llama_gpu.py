"""Text generation on the GPU: ggpy's llama graph on CUDA, prompt processing and generation tokens/s per weight type.

    python benchmarks/llama_gpu.py [-m MODEL.gguf ...] [--weights q4_1,q8_0,f16] [--prompt 512] [--gen 128]
                                   [--rounds 3]

With -m, those files. Without, models of SmolLM2-135M's shape (30 blocks, width 576, 9 query / 3 KV heads, MLP
1536, vocabulary 49152, output tied to the token embedding) with seeded random weights, written once per --weights
type into a temporary folder (tests/models/llama_tiny.py; the GPU machine cannot download the real file, and tokens/s do
not depend on the values): matrices of that type, the embedding Q8_0 (F16 for f16), norms F32. As
benchmarks/llama_cpu.py, a round forgets the cache, reads a seeded random prompt (only the last logits kept), then
`gen` random tokens one at a time; the first round (building, planning, the CUDA graph captures, and on a fresh
machine the NVRTC compile) is shown apart, the table gives the median of the later rounds. Memory: weights, KV cache
(F32) and both planned compute lanes, in device memory. llama.cpp's CUDA build is reported when llama_cpp is
importable with GPU offload.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "models")]

SMOLLM2_SHAPE = {"n_layer": 30, "n_embd": 576, "n_head": 9, "n_head_kv": 3, "n_ff": 1536, "n_ctx": 8192,
                 "n_vocab": 49152, "rope_base": 100000.0, "tied": True}
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def synthetic_model(folder: Path, weights: str) -> Path:
    """A SmolLM2-shaped GGUF with random `weights`-type matrices."""
    import gguf
    from llama_tiny import write_tiny_llama
    q = gguf.GGMLQuantizationType[weights.upper()]
    embd = gguf.GGMLQuantizationType.F16 if weights == "f16" else gguf.GGMLQuantizationType.Q8_0
    t0 = time.perf_counter()
    path = write_tiny_llama(folder / f"smollm2-shape-{weights}.gguf", seed=0, types={"token_embd": embd} | dict.fromkeys(MATRICES, q),
                            **SMOLLM2_SHAPE)
    print(f"wrote {path.name} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def run_rounds(model, n_vocab: int, opts) -> tuple:
    """(first round's (pp, tg) tokens/s, the later rounds' medians)."""
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, n_vocab, opts.prompt)]
    gen = [int(t) for t in rng.integers(0, n_vocab, opts.gen)]
    rates = []
    for _ in range(opts.rounds + 1):
        model.reset()
        t0 = time.perf_counter()
        model.eval(prompt, all_logits=False)
        t1 = time.perf_counter()
        for t in gen:
            model.eval([t])
        t2 = time.perf_counter()
        rates.append((len(prompt) / (t1 - t0), len(gen) / (t2 - t1)))
    later = rates[1:]
    return rates[0], (statistics.median(r[0] for r in later), statistics.median(r[1] for r in later))


def bench_ggpy(path: Path, opts) -> dict:
    from ggpy.models.llama.gguf_file import open_llama
    from ggpy.models.llama.runner import GraphModel
    t0 = time.perf_counter()
    model = GraphModel(open_llama(path), "cuda", n_ctx=opts.prompt + opts.gen, n_batch=512)
    load = time.perf_counter() - t0
    first, (pp, tg) = run_rounds(model, model.hp.n_vocab, opts)
    return {"load_s": load, "first": first, "pp": pp, "tg": tg, "memory": model.nbytes}


def bench_llama_cpp(path: Path, opts) -> dict | str:
    try:
        import llama_cpp
    except ImportError:
        return "llama_cpp not importable here (no CUDA build of llama-cpp-python on this machine)"
    if not llama_cpp.llama_supports_gpu_offload():
        return f"llama-cpp-python {llama_cpp.__version__} is a CPU build"
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=opts.prompt + opts.gen, n_batch=512, n_gpu_layers=-1,
                          verbose=False)
    first, (pp, tg) = run_rounds(_LlamaCpp(llm), llm.n_vocab(), opts)
    return {"first": first, "pp": pp, "tg": tg}


class _LlamaCpp:
    def __init__(self, llm):
        self.llm = llm

    def reset(self):
        self.llm.reset()

    def eval(self, ids, all_logits=True):
        self.llm.eval(ids)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", action="append", help="GGUF file(s); default: SmolLM2-shaped random models")
    p.add_argument("--weights", default="q4_1,q8_0,f16", help="weight types of the random models")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args(argv)
    import ggpy
    backend = ggpy.backends.make_backend("cuda")
    print(f"{backend}; prompt {opts.prompt} tokens, {opts.gen} generated, {opts.rounds} rounds after a first",
          flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(m) for m in opts.model] if opts.model else [synthetic_model(Path(tmp), w)
                                                                  for w in opts.weights.split(",")]
        for path in paths:
            r = bench_ggpy(path, opts)
            mem = " / ".join(f"{r['memory'][k] / 2**20:.0f}" for k in ("weights", "kv_cache", "compute"))
            rows.append(f"| ggpy CUDA | {path.name} | {r['pp']:.0f} | {r['tg']:.0f} | {r['first'][0]:.0f} / "
                        f"{r['first'][1]:.0f} | {mem} |")
            print(rows[-1], f"(load {r['load_s']:.1f} s)", flush=True)
            ref = bench_llama_cpp(path, opts)
            if isinstance(ref, str):
                print(f"llama.cpp: {ref}", flush=True)
            else:
                rows.append(f"| llama.cpp CUDA | {path.name} | {ref['pp']:.0f} | {ref['tg']:.0f} | "
                            f"{ref['first'][0]:.0f} / {ref['first'][1]:.0f} | |")
    print(f"\n| runtime | model | pp{opts.prompt} tok/s | tg{opts.gen} tok/s | first round pp / tg | weights / KV / "
          "compute MiB |\n| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
