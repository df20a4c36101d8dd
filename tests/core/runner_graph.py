"""A small graph for the GraphRunner and Scheduler tests, with its float64 numpy reference.

ids (I32 ne = (N,)) and bias (F32 ne = (M, N)) are the inputs; emb (K, V), w1 (K, Hd), b1 (Hd,) and w2 (Hd, M) the
weights. x = get_rows(emb, ids) (K, N); h = gelu(w1 x + b1) (Hd, N); outputs "p" = soft_max(w2 h + bias) (M, N) and
"energy" = sum_rows(h * h) (1, N).
"""
from __future__ import annotations

import numpy as np

import ggpy
from ggpy.backends.cpu import CPUBackend

K, V, HD, M, N = 16, 10, 24, 12, 5


class Device(CPUBackend):
    """A CPU backend under another name that refuses the ops in `refuse` (none by default)."""

    def __init__(self, refuse=(), name="dev"):
        super().__init__(n_threads=2)
        self.refuse, self.name = tuple(refuse), name

    def supports_op(self, node) -> bool:
        return node.op not in self.refuse and super().supports_op(node)


def build(weights_backend):
    """(graph, weights {name: Tensor}) with the weights in `weights_backend`'s memory, set to `values`."""
    wctx, ctx = ggpy.Context(), ggpy.Context()
    w = {"emb": wctx.new_tensor(ggpy.F32, (K, V)), "w1": wctx.new_tensor(ggpy.F32, (K, HD)),
         "b1": wctx.new_tensor(ggpy.F32, (HD,)), "w2": wctx.new_tensor(ggpy.F32, (HD, M))}
    for name, t in w.items():
        t.set_name(name)
    ids = ctx.new_tensor(ggpy.I32, (N,)).set_name("ids").set_input()
    bias = ctx.new_tensor(ggpy.F32, (M, N)).set_name("bias").set_input()
    h = ggpy.gelu(ggpy.add(ggpy.mul_mat(w["w1"], ggpy.get_rows(w["emb"], ids)), w["b1"])).set_name("h")
    p = ggpy.soft_max(ggpy.add(ggpy.mul_mat(w["w2"], h), bias)).set_name("p")
    energy = ggpy.sum_rows(ggpy.mul(h, h)).set_name("energy")
    graph = ggpy.Graph().build_forward_expand(p).build_forward_expand(energy)
    ggpy.alloc_ctx_tensors(wctx, weights_backend)
    return graph, w


def weight_values(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"emb": rng.uniform(-1, 1, (V, K)), "w1": rng.uniform(-0.5, 0.5, (HD, K)),
            "b1": rng.uniform(-0.5, 0.5, HD), "w2": rng.uniform(-0.5, 0.5, (M, HD))}


def input_values(seed: int) -> dict:
    rng = np.random.default_rng(1000 + seed)
    return {"ids": rng.integers(0, V, N).astype(np.int32), "bias": rng.uniform(-1, 1, (N, M))}


def set_weights(w: dict, values: dict):
    for name, t in w.items():
        t.set(values[name].astype(np.float32))


def reference(wv: dict, iv: dict) -> dict:
    """float64 {"p": (N, M), "energy": (N, 1)}: numpy shapes of the outputs (reversed ne)."""
    x = wv["emb"][iv["ids"]]
    z = x @ wv["w1"].T + wv["b1"]
    h = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    y = h @ wv["w2"].T + iv["bias"]
    e = np.exp(y - y.max(1, keepdims=True))
    return {"p": e / e.sum(1, keepdims=True), "energy": (h * h).sum(1, keepdims=True)}


def close(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> bool:
    """Relative to the largest magnitude of `want` (an F32 computation against a float64 reference)."""
    return got.shape == want.shape and float(np.abs(got - want).max()) <= tol * float(np.abs(want).max())
