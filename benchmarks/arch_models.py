"""Random models of issue 29's benchmark shapes, written once as GGUF by llama.cpp's own converter: a Qwen3-MoE
(30B-A3B's layout scaled down: 48 experts, 8 used a token) and a Gemma-3 text model (1B's layout scaled down: one KV
head of 256, sliding windows of 512 in five blocks of six), random weights (transformers), the tests' tiny byte-level
BPE vocabulary (320 tokens), Q8_0 (and F16) as the converter writes them. Then time them beside llama.cpp with
`python3 benchmarks/llama_cpu.py -m PATH` (CPU) or `benchmarks/llama_gpu.py -m PATH` (GPU).

    python3 benchmarks/arch_models.py [--out /tmp/ggpy-arch-models] [--types q8_0,f16] [--shapes qwen3moe,gemma3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "models")]

SHAPES = {   # name -> (config class, model class, config): Qwen3-30B-A3B / Gemma-3-1B, scaled down
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
                  "head_dim": 64, "intermediate_size": 1536, "moe_intermediate_size": 256, "num_experts": 48,
                  "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "max_position_embeddings": 8192}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"hidden_size": 640, "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 1,
                "head_dim": 256, "query_pre_attn_scalar": 256, "intermediate_size": 2560, "sliding_window": 512,
                "max_position_embeddings": 8192}),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/ggpy-arch-models")
    p.add_argument("--types", default="q8_0,f16")
    p.add_argument("--shapes", default=",".join(SHAPES), help="which of the shapes (comma-separated)")
    opts = p.parse_args(argv)
    shapes = {name: SHAPES[name] for name in opts.shapes.split(",")}
    from hf_convert import convert, save_tiny
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for name, (cfg, cls, config) in shapes.items():
        model_dir = out / name
        if not (model_dir / "config.json").exists():
            t0 = time.perf_counter()
            save_tiny(model_dir, cfg, cls, 0, **config)
            print(f"{name}: random transformers model written in {time.perf_counter() - t0:.0f} s", flush=True)
        jobs |= {(model_dir, t): out / f"{name}-{t}.gguf" for t in opts.types.split(",")
                 if not (out / f"{name}-{t}.gguf").exists()}
    if jobs:
        t0 = time.perf_counter()
        convert(jobs)
        print(f"converted {len(jobs)} files in {time.perf_counter() - t0:.0f} s", flush=True)
    for name in shapes:
        for t in opts.types.split(","):
            path = out / f"{name}-{t}.gguf"
            print(f"{path} ({path.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
