"""CPU op benchmark: ggpy vs numpy (and PyTorch when installed), side by side, same thread count.

    python benchmarks/cpu_ops.py [-t THREADS] [--rounds N]

Each case is timed round-robin so machine drift hits all alike: in each round every implementation gets a
short pause (no library's spinning worker threads steal cores from the next), one untimed warm-up call and
one timed call. The table shows medians and ggpy's speed relative to each other implementation.
"""
import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

import ggpy

try:
    import torch
except ImportError:      # optional
    torch = None


def planned(backend, build, inputs):
    """A planned graph of `build(*leafs)` with leafs shaped like `inputs` (numpy arrays) set to them."""
    ctx = ggpy.Context()
    leafs = [ctx.new_tensor(ggpy.F32, tuple(reversed(x.shape))) for x in inputs]
    out = build(*leafs)
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    for t, x in zip(leafs, inputs):
        t.set(x)
    backend.compute(graph)
    return lambda: backend.compute(graph)


def np_gelu(x, out):
    np.multiply(x, x, out=out)
    out *= x
    out *= np.float32(0.044715)
    out += x
    out *= np.float32(0.7978845608028654)
    np.tanh(out, out=out)
    out += 1
    out *= x
    out *= np.float32(0.5)


def np_softmax(x, out):
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)


def np_norm(x, out):
    mu = x.mean(axis=-1, keepdims=True)
    np.subtract(x, mu, out=out)
    out /= np.sqrt((out * out).mean(axis=-1, keepdims=True) + 1e-5)


def cases(backend, rng):
    n = 16 << 20
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    o = np.empty_like(a)
    m1, m2 = rng.standard_normal((1024, 1024), dtype=np.float32), rng.standard_normal((1024, 1024), dtype=np.float32)
    mo = np.empty_like(m1)
    s = rng.standard_normal((4096, 4096), dtype=np.float32)
    so = np.empty_like(s)
    r = rng.standard_normal((65536, 160), dtype=np.float32)
    ro = np.empty_like(r)
    t = {}
    if torch is not None:
        t = {k: torch.from_numpy(v) for k, v in {"a": a, "b": b, "o": o, "m1": m1, "m2": m2, "mo": mo, "s": s, "so": so, "r": r, "ro": ro}.items()}
    yield ("mul_mat f32 1024^3", 2 * 1024 ** 3, {
        "ggpy": planned(backend, ggpy.mul_mat, [m1, m2]),
        "numpy": lambda: np.matmul(m2, m1.T, out=mo),
        "torch": t and (lambda: torch.matmul(t["m2"], t["m1"].T, out=t["mo"]))})
    for name, op, np_op, th_op in (("add", ggpy.add, np.add, torch and torch.add),
                                   ("mul", ggpy.mul, np.multiply, torch and torch.mul)):
        yield (f"{name} f32 16M", 0, {
            "ggpy": planned(backend, op, [a, b]),
            "numpy": lambda np_op=np_op: np_op(a, b, out=o),
            "torch": t and (lambda th_op=th_op: th_op(t["a"], t["b"], out=t["o"]))})
    yield ("gelu f32 16M", 0, {
        "ggpy": planned(backend, ggpy.gelu, [a]),
        "numpy": lambda: np_gelu(a, o),
        "torch": t and (lambda: torch.nn.functional.gelu(t["a"], approximate="tanh"))})
    yield ("soft_max f32 4096x4096", 0, {
        "ggpy": planned(backend, ggpy.soft_max, [s]),
        "numpy": lambda: np_softmax(s, so),
        "torch": t and (lambda: torch.softmax(t["s"], -1))})
    yield ("norm f32 ne=(160, 65536)", 0, {
        "ggpy": planned(backend, lambda x: ggpy.norm(x, 1e-5), [r]),
        "numpy": lambda: np_norm(r, ro),
        "torch": t and (lambda: torch.nn.functional.layer_norm(t["r"], (160,), eps=1e-5))})


def add_chain(backend, n_nodes=1000):
    """Fixed cost of evaluating a graph: a chain of `n_nodes` adds on 16 floats."""
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (16,))
    y = ctx.new_tensor(ggpy.F32, (16,))
    t = x
    for _ in range(n_nodes):
        t = ggpy.add(t, y)
    graph = ggpy.Graph().build_forward_expand(t)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    x.set(np.ones(16))
    y.set(np.ones(16))
    backend.compute(graph)
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        backend.compute(graph)
        times.append(time.perf_counter() - t0)
    return np.median(times) / n_nodes * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    backend = ggpy.CPUBackend(n_threads=args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(f"threads={args.threads} rounds={args.rounds} numpy {np.__version__}"
          + (f" torch {torch.__version__}" if torch is not None else " (torch not installed)"))
    print(f"{'case':<26} {'ggpy ms':>9} {'numpy ms':>9} {'torch ms':>9} {'numpy/ggpy':>11} {'torch/ggpy':>11} {'ggpy GFLOP/s':>13}")
    rng = np.random.default_rng(0)
    with threadpool_limits(args.threads, user_api="blas"):
        for name, flops, impls in cases(backend, rng):
            impls = {k: v for k, v in impls.items() if v}
            for f in impls.values():
                f()
            times = {k: [] for k in impls}
            for _ in range(args.rounds):
                for k, f in impls.items():
                    time.sleep(0.15)     # OpenBLAS and OpenMP workers spin ~0.1 s after a call: let them idle
                    f()                  # warm this library's threads and caches, then time the next call
                    t0 = time.perf_counter()
                    f()
                    times[k].append(time.perf_counter() - t0)
            med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
            g = med["ggpy"]
            col = [f"{med[k]:9.2f}" if k in med else f"{'-':>9}" for k in ("ggpy", "numpy", "torch")]
            ratio = [f"{med[k] / g:11.2f}" if k in med else f"{'-':>11}" for k in ("numpy", "torch")]
            gf = f"{flops / g / 1e6:13.1f}" if flops else f"{'':>13}"
            print(f"{name:<26} {' '.join(col)} {' '.join(ratio)} {gf}", flush=True)
    print(f"graph fixed cost: chain of 1000 add nodes on 16 floats: {add_chain(backend):.2f} us per node")


if __name__ == "__main__":
    main()
