"""A transformer block on ggpy's CPU backend, checked against a float64 numpy reference.

    python examples/demo.py [-t THREADS] [--tokens N] [--dim D]

Builds the graph once (LayerNorm -> self-attention -> residual -> LayerNorm -> GELU MLP -> residual),
plans its memory, evaluates it several times with fresh inputs, and prints the plan and the timings.
"""
import argparse
import time

import numpy as np

import ggpy


def block_graph(ctx, n_tokens: int, dim: int, n_heads: int):
    """Inputs and output of one pre-norm transformer block. x.ne = (dim, n_tokens)."""
    inp = ctx.new_tensor(ggpy.F32, (dim, n_tokens)).set_name("x").set_input()
    w = {name: ctx.new_tensor(ggpy.F32, ne).set_name(name).set_input() for name, ne in (
        ("wq", (dim, dim)), ("wk", (dim, dim)), ("wv", (dim, dim)), ("wo", (dim, dim)),
        ("w1", (dim, 4 * dim)), ("b1", (4 * dim,)), ("w2", (4 * dim, dim)), ("b2", (dim,)))}
    hd = dim // n_heads
    h = ggpy.norm(inp, 1e-5)
    q = ggpy.permute(ggpy.reshape_3d(ggpy.mul_mat(w["wq"], h), hd, n_heads, n_tokens), 0, 2, 1, 3)
    k = ggpy.permute(ggpy.reshape_3d(ggpy.mul_mat(w["wk"], h), hd, n_heads, n_tokens), 0, 2, 1, 3)
    v = ggpy.permute(ggpy.reshape_3d(ggpy.mul_mat(w["wv"], h), hd, n_heads, n_tokens), 1, 2, 0, 3)
    scores = ggpy.soft_max_ext(ggpy.mul_mat(k, q), None, 1.0 / np.sqrt(hd))      # (tokens_k, tokens_q, heads)
    att = ggpy.mul_mat(ggpy.cont(v), scores)                                       # (hd, tokens, heads)
    att = ggpy.cont_2d(ggpy.permute(att, 0, 2, 1, 3), dim, n_tokens)
    x = ggpy.add(inp, ggpy.mul_mat(w["wo"], att))
    h = ggpy.gelu(ggpy.add(ggpy.mul_mat(w["w1"], ggpy.norm(x, 1e-5)), w["b1"]))
    out = ggpy.add(x, ggpy.add(ggpy.mul_mat(w["w2"], h), w["b2"])).set_name("out")
    return inp, w, out


def reference(x, w, n_heads):
    """The same block in float64 numpy; x has shape (tokens, dim)."""
    def ln(t):
        return (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + 1e-5)
    n, dim = x.shape
    hd = dim // n_heads
    h = ln(x)
    q, k, v = (h @ w[name].T for name in ("wq", "wk", "wv"))
    q, k, v = (t.reshape(n, n_heads, hd).transpose(1, 0, 2) for t in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    x = x + (p @ v).transpose(1, 0, 2).reshape(n, dim) @ w["wo"].T
    u = ln(x) @ w["w1"].T + w["b1"]
    g = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
    return x + g @ w["w2"].T + w["b2"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    ctx = ggpy.Context()
    x, weights, out = block_graph(ctx, args.tokens, args.dim, args.heads)
    graph = ggpy.Graph().build_forward_expand(out)
    backend = ggpy.CPUBackend(n_threads=args.threads)
    plan = ggpy.GraphAllocator(backend).alloc_graph(graph)
    print(f"graph: {len(graph.nodes)} nodes, {len(graph.leafs)} leafs; backend {backend}")
    print(plan.report().splitlines()[0])

    rng = np.random.default_rng(0)
    w = {name: rng.standard_normal(tuple(reversed(t.ne[:t.n_dims]))) / np.sqrt(t.ne[0]) for name, t in weights.items()}
    for name, t in weights.items():
        t.set(w[name])
    for run in range(args.runs):
        xv = rng.standard_normal((args.tokens, args.dim))
        x.set(xv)
        t0 = time.perf_counter()
        backend.compute(graph)
        ms = (time.perf_counter() - t0) * 1e3
        ref = reference(xv, w, args.heads)
        err = np.linalg.norm(out.numpy() - ref) / np.linalg.norm(ref)
        print(f"run {run}: {ms:8.2f} ms   relative error vs float64 numpy {err:.2e}"
              + ("   (includes numba compilation)" if run == 0 else ""))
    if err > 1e-4:
        raise SystemExit(f"FAILED: relative error {err:.2e} > 1e-4")
    print("OK")


if __name__ == "__main__":
    main()
