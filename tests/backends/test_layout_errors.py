"""get_rows with a row index outside its source raises a clear ggpy error at compute time."""
import numpy as np
import pytest

import ggpy


def _get_rows_graph(backend, ne_a, n):
    ctx = ggpy.Context()
    a = ctx.new_tensor(ggpy.F32, ne_a).set_input()
    idx = ctx.new_tensor(ggpy.I32, (n, ne_a[2], ne_a[3])).set_input()
    out = ggpy.get_rows(a, idx).set_output()
    graph = ggpy.Graph().build_forward_expand(out)
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    a.set(np.random.default_rng(0).uniform(-1, 1, size=tuple(reversed(ne_a))))
    return graph, a, idx, out


@pytest.mark.parametrize("bad", [7, 1000, -1])
@pytest.mark.parametrize("ne_a,n", [((5, 7, 2, 3), 4), ((256, 7, 1, 1), 400)])   # one worker; two workers
def test_get_rows_index_out_of_range(bad, ne_a, n):
    backend = ggpy.CPUBackend(n_threads=2)
    graph, a, idx, out = _get_rows_graph(backend, ne_a, n)
    values = np.zeros((1, ne_a[3], ne_a[2], n), dtype=np.int32)
    values[0, -1, 0, 2] = bad
    idx.set(values)
    with pytest.raises(ggpy.GGPYError, match=rf"outside \[0, 7\).*first: {bad} at b\[2, 0, {ne_a[3] - 1}\]") as err:
        backend.compute(graph)
    assert isinstance(err.value, IndexError)

    idx.set(values % 7)     # the same graph computes once the indices are valid
    backend.compute(graph)
    expected = a.numpy().reshape(tuple(reversed(ne_a)))[-1, 0, bad % 7]
    np.testing.assert_array_equal(out.numpy().reshape(ne_a[3], ne_a[2], n, ne_a[0])[-1, 0, 2], expected)
