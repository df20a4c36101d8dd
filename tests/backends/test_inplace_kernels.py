"""Element-wise kernels on nodes the planner placed in their source's memory (in place), vs float64 numpy."""
import numpy as np
import pytest

import ggpy


def _same_place(node, src) -> bool:
    return node.buffer is src.buffer and node.offset == src.offset


@pytest.mark.parametrize("unary", ["gelu_erf", "gelu", "silu", "relu"])
@pytest.mark.parametrize("bias_ne", [(37, 1, 1), (1, 1, 5), (37, 11, 1)])
def test_inplace_add_then_unary(unary, bias_ne):
    """y = unary((x * w) + b): the add runs in the mul's memory and the unary in the add's, b broadcast."""
    rng = np.random.default_rng(7)
    ctx = ggpy.Context()
    x = ctx.new_tensor(ggpy.F32, (37, 11, 5)).set_input()
    w = ctx.new_tensor(ggpy.F32, (37, 11, 5)).set_input()
    b = ctx.new_tensor(ggpy.F32, bias_ne).set_input()
    prod = ggpy.mul(x, w)
    summed = ggpy.add(prod, b)
    y = getattr(ggpy, unary)(summed)
    graph = ggpy.Graph().build_forward_expand(y)
    backend = ggpy.CPUBackend(n_threads=2)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    assert _same_place(summed, prod) and _same_place(y, summed)
    xv, wv, bv = (rng.standard_normal(tuple(reversed(t.ne))) for t in (x, w, b))
    for t, v in ((x, xv), (w, wv), (b, bv)):
        t.set(v)
    backend.compute(graph)
    s = xv * wv + bv
    ref = {"gelu_erf": lambda u: 0.5 * u * (1 + np.vectorize(__import__("math").erf)(u / np.sqrt(2))),
           "gelu": lambda u: 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3))),
           "silu": lambda u: u / (1 + np.exp(-u)),
           "relu": lambda u: np.maximum(u, 0)}[unary](s)
    np.testing.assert_allclose(y.numpy().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)
