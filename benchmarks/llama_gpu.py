"""Text generation on the GPU: ggpy's llama graph on CUDA beside llama.cpp's llama-bench, on the same files.

    python benchmarks/llama_gpu.py [-m MODEL.gguf ...] [--models smollm2-q4_1,...] [--depths 0,4096] [--gen 128]
                                   [--rounds 3] [--llama-cpp BIN_DIR] [--out DIR]

Without -m, random models (tests/models/llama_tiny.py; the GPU machine cannot download, and tokens/s do not depend on
the values) written once into --out: SmolLM2-135M's shape (30 blocks, width 576, 9 query / 3 KV heads, MLP 1536,
vocabulary 49152, tied output) in Q4_1 and Q8_0, and Llama-3.2-1B's (16 blocks, width 2048, 32 / 8 heads, MLP 8192,
vocabulary 128256, rope base 500000 with llama3 rope scaling) written F16 and quantized to Q4_K_M and Q8_0 by
llama.cpp's llama-quantize from --llama-cpp (skipped without it).

ggpy runs what `ggpy-llama -b cuda --temp 0` runs (GraphModel + generate: F16 KV cache, flash attention when the
backend has it, the greedy token chosen on the GPU). At each context depth d a round forgets the cache, reads d
seeded random tokens untimed, then times a 512-token prompt chunk (pp512 @ d); then forgets, reads d tokens again and
times generating --gen tokens (tg @ d) — llama-bench's -d semantics. The first round (planning, CUDA graph captures,
on a fresh machine the NVRTC compile) is not counted; the table gives medians of --rounds. Also reported: the host
time per generated token (everything but waiting for the GPU: mean, median, worst), the kernels per token (the
captured CUDA graph's nodes), the weights' bandwidth during generation (weight bytes read per token x tokens/s),
memory (weights, KV cache, compute buffers). llama.cpp: `llama-bench -ngl 99 -fa 1 -p 512 -n GEN -r ROUNDS -d DEPTHS` (flash attention,
its F16 KV cache) when --llama-cpp names its build's bin folder.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "models")]

SHAPES = {
    "smollm2": {"n_layer": 30, "n_embd": 576, "n_head": 9, "n_head_kv": 3, "n_ff": 1536, "n_ctx": 8192,
                "n_vocab": 49152, "rope_base": 100000.0, "tied": True},
    "llama1b": {"n_layer": 16, "n_embd": 2048, "n_head": 32, "n_head_kv": 8, "n_ff": 8192, "n_ctx": 131072,
                "n_vocab": 128256, "rope_base": 500000.0, "tied": True},
}
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
PP = 512


def write_model(folder: Path, shape: str, weights: str) -> Path:
    """A random GGUF of `shape` with `weights`-type matrices (the embedding Q8_0, F16 for f16)."""
    import gguf
    from llama_tiny import write_tiny_llama
    path = folder / f"{shape}-{weights}.gguf"
    if path.exists():
        return path
    q = gguf.GGMLQuantizationType[weights.upper()]
    embd = gguf.GGMLQuantizationType.F16 if weights == "f16" else gguf.GGMLQuantizationType.Q8_0
    t0 = time.perf_counter()
    freqs = llama3_rope_freqs(SHAPES[shape]["n_embd"] // SHAPES[shape]["n_head"]) if shape == "llama1b" else None
    write_tiny_llama(path, seed=0, types={"token_embd": embd} | dict.fromkeys(MATRICES, q), rope_freqs=freqs,
                     **SHAPES[shape])
    print(f"wrote {path.name} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def llama3_rope_freqs(head_dim: int, base: float = 500000.0, factor: float = 32.0, low: float = 1.0,
                      high: float = 4.0, n_ctx_orig: int = 8192) -> np.ndarray:
    """Llama 3.x's rope scaling as convert_hf_to_gguf stores it: a divisor per rotated pair's frequency."""
    wavelen = 2 * np.pi * base ** (np.arange(0, head_dim, 2) / head_dim)
    smooth = np.clip((n_ctx_orig / wavelen - low) / (high - low), 0, 1)
    return np.where(wavelen < n_ctx_orig / high, 1.0, np.where(wavelen > n_ctx_orig / low, factor,
                                                               1 / ((1 - smooth) / factor + smooth)))


def quantize(f16: Path, kind: str, bin_dir: Path) -> Path:
    """llama-quantize f16 -> kind (Q4_K_M, Q8_0)."""
    out = f16.with_name(f16.name.replace("f16", kind.lower()))
    if not out.exists():
        subprocess.run([str(bin_dir / "llama-quantize"), str(f16), str(out), kind], check=True, capture_output=True)
        print(f"quantized {out.name} ({out.stat().st_size / 2**20:.0f} MiB)", flush=True)
    return out


def models(opts) -> list:
    if opts.model:
        return [Path(m) for m in opts.model]
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in opts.models.split(","):
        shape, weights = name.split("-", 1)
        if weights in ("q4_1", "q8_0") and shape == "smollm2":
            paths.append(write_model(out, shape, weights))
        elif opts.llama_cpp:
            paths.append(quantize(write_model(out, shape, "f16"), weights.upper(), Path(opts.llama_cpp)))
        else:
            print(f"{name}: skipped (llama-quantize needs --llama-cpp)", flush=True)
    return paths


def ggpy_round(model, sampler, depth: int, gen: int, rng) -> tuple:
    """(pp512 seconds, tg seconds) at `depth`, and the generation's first-token seconds."""
    from ggpy.models.llama.generate import generate
    fill = [int(t) for t in rng.integers(0, model.hp.n_vocab, depth + PP)]
    model.reset()
    if depth:
        model.eval(fill[:depth], all_logits=False)
    t0 = time.perf_counter()
    model.eval(fill[depth:], all_logits=False)
    pp = time.perf_counter() - t0
    model.reset()
    if depth:
        model.eval(fill[:depth], all_logits=False)
    out = generate(model, fill[depth:depth + 1], gen + 1, sampler)      # one token read, gen + 1 chosen: gen evaluations
    return pp, out.gen_s / max(out.n_steady, 1), out.first_token_s


def bench_ggpy(path: Path, opts) -> list:
    from ggpy.models.llama.gguf_file import open_llama
    from ggpy.models.llama.runner import GraphModel
    from ggpy.models.llama.sampling import Sampler
    rows = []
    depths = [int(d) for d in opts.depths.split(",")]
    t0 = time.perf_counter()
    model = GraphModel(open_llama(path), "cuda", n_ctx=max(depths) + PP + opts.gen + 1, n_batch=PP)
    load = time.perf_counter() - t0
    weights = model.weights.nbytes - model.weights.get("token_embd.weight").nbytes * (
        "output.weight" in model.weights.tensors)      # the embedding's rows are gathered, not read whole
    rng = np.random.default_rng(0)
    for depth in depths:
        times = [ggpy_round(model, Sampler(temp=0), depth, opts.gen, rng) for _ in range(opts.rounds + 1)]
        model.stats.tokens = model.stats.token_host_s = 0
        pp = statistics.median(t[0] for t in times[1:])
        tg = statistics.median(t[1] for t in times[1:])
        lane = model._lanes[True]
        captured = model.backend.cuda_graph(lane.runner.graph)
        rows.append({"depth": depth, "pp": PP / pp, "tg": 1 / tg, "first_token_s": times[0][2], "load_s": load,
                     "kernels": getattr(captured, "nodes", None), "bandwidth": weights / tg,
                     "host_us": _host_us(model, depth, opts), "memory": model.nbytes, "fa": model.flash_attn})
        print(f"  ggpy {path.name} d{depth}: pp {rows[-1]['pp']:.0f} tg {rows[-1]['tg']:.0f} tok/s", flush=True)
    return rows


def _host_us(model, depth: int, opts) -> tuple:
    """Host microseconds per generated token over one more generation (Stats.token_host_s, token by token; each
    next_token is generate()'s submit and result without its on_token between): (mean, median, max)."""
    from ggpy.models.llama.sampling import Sampler
    sampler = Sampler(temp=0)
    model.reset()
    fill = [int(t) for t in np.random.default_rng(1).integers(0, model.hp.n_vocab, depth + 1)]
    if depth:
        model.eval(fill[:depth], all_logits=False)
    token, per = model.next_token(fill[depth:], sampler), []
    for _ in range(opts.gen):
        before = model.stats.token_host_s
        token = model.next_token([token], sampler)
        per.append((model.stats.token_host_s - before) * 1e6)
    return statistics.mean(per), statistics.median(per), max(per)


def bench_llama_cpp(path: Path, opts) -> dict:
    """{(test, depth): tokens/s} from llama-bench, or {} without --llama-cpp."""
    if not opts.llama_cpp:
        return {}
    cmd = [str(Path(opts.llama_cpp) / "llama-bench"), "-m", str(path), "-ngl", "99", "-fa", "1", "-p", str(PP),
           "-n", str(opts.gen), "-r", str(opts.rounds), "-d", opts.depths, "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"llama-bench failed: {r.stderr[-2000:]}", flush=True)
        return {}
    out = {}
    for test in json.loads(r.stdout):
        kind = "pp" if test["n_prompt"] else "tg"
        out[(kind, test["n_depth"])] = test["avg_ts"]
    return out


def llama_cpp_memory(path: Path, opts) -> dict:
    """{kind: {buffer: MiB}} (kind model / KV / compute) that llama.cpp reports (llama-bench -v's log) for one context of
    ggpy's size: a prompt of PP and GEN generated tokens at the largest depth (llama-bench's n_ctx = depth + PP + GEN)."""
    if not opts.llama_cpp:
        return {}
    depth = max(int(d) for d in opts.depths.split(","))
    cmd = [str(Path(opts.llama_cpp) / "llama-bench"), "-m", str(path), "-ngl", "99", "-fa", "1", "-p", "0", "-n", "0",
           "-pg", f"{PP},{opts.gen}", "-d", str(depth), "-r", "1", "-v"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = {}
    for m in re.finditer(r"(\S+) (model|KV|compute) buffer size =\s*([0-9.]+) MiB", r.stderr + r.stdout):
        out.setdefault(m[2], {})[m[1]] = out.get(m[2], {}).get(m[1], 0.0) + float(m[3])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", action="append", help="GGUF file(s); default: the random models above")
    p.add_argument("--models", default="smollm2-q4_1,smollm2-q8_0,llama1b-q4_k_m,llama1b-q8_0",
                   help="random models: SHAPE-TYPE, SHAPE smollm2 or llama1b")
    p.add_argument("--depths", default="0,4096", help="context depths (0,4096)")
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--llama-cpp", metavar="BIN_DIR", help="llama.cpp's build/bin (llama-bench, llama-quantize)")
    p.add_argument("--out", default="/tmp/ggpy-bench-models", help="folder of the random models")
    p.add_argument("--prepare-only", action="store_true", help="write (and quantize) the models, then stop")
    opts = p.parse_args(argv)
    if opts.prepare_only:
        print("\n".join(str(m) for m in models(opts)))
        return 0
    import ggpy
    backend = ggpy.backends.make_backend("cuda")
    print(f"{backend}; pp{PP} and tg{opts.gen} at depths {opts.depths}, {opts.rounds} rounds after a first",
          flush=True)
    table, extra, memory = [], [], []
    for path in models(opts):
        rows, ref, mem = bench_ggpy(path, opts), bench_llama_cpp(path, opts), llama_cpp_memory(path, opts)
        m = rows[-1]["memory"]
        memory.append(f"| {path.name} | {rows[-1]['depth'] + PP + opts.gen} | {m['weights'] / 2**20:.0f} / "
                      f"{m['kv_cache'] / 2**20:.0f} / {m['compute'] / 2**20:.0f} | "
                      + " / ".join(", ".join(f"{k} {v:.0f}" for k, v in mem.get(kind, {}).items()) or "-"
                                   for kind in ("model", "KV", "compute")) + " |")
        for r in rows:
            d = r["depth"]
            lpp, ltg = ref.get(("pp", d)), ref.get(("tg", d))
            ratio = (f"{r['pp'] / lpp:.2f} | {r['tg'] / ltg:.2f}" if lpp and ltg else "- | -")
            table.append(f"| {path.name} | {d} | {r['pp']:.0f} | {r['tg']:.0f} | {lpp or 0:.0f} | {ltg or 0:.0f} | "
                         f"{ratio} |")
            print(table[-1], flush=True)
            m = r["memory"]
            extra.append(f"| {path.name} | {d} | {' / '.join(f'{v:.0f}' for v in r['host_us'])} | {r['kernels']} | {r['bandwidth'] / 1e9:.0f} | "
                         f"{r['first_token_s'] * 1e3:.0f} | {r['load_s']:.1f} | {m['weights'] / 2**20:.0f} / "
                         f"{m['kv_cache'] / 2**20:.0f} / {m['compute'] / 2**20:.0f} | {r['fa']} |")
    print(f"\n| model | depth | ggpy pp{PP} tok/s | ggpy tg{opts.gen} tok/s | llama.cpp pp | llama.cpp tg | "
          "pp ratio | tg ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(table))
    print("\n| model | depth | host us / token (mean / median / max) | kernels / token | weights GB/s | first token ms | load s | "
          "weights / KV / compute MiB | flash attn |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(extra))
    print("\n| model | context | ggpy weights / KV / compute MiB | llama.cpp model / KV / compute buffers MiB |\n"
          "| --- | --- | --- | --- |")
    print("\n".join(memory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
