"""The rope_kv pattern (ggpy/graph/fusion.py, run by CUDA's rope entry: kernels/rope.py) and fa_vec's one-launch
merge of its key chunks (kernels/attention_flash.py). Without a GPU: where the fusion pass finds rope_kv through the
CUDA kernel table (the k and v products ready at the q rope's turn, e.g. written early by norm_mat_vec; each cache
read by its set_rows alone). On a GPU: the rope_kv test-backend-ops cases ran as one launch, values against float64,
and a split decode attention is one launch."""
import pytest

import ggpy
from ggpy.backends.base import Backend
from ggpy.backends.cuda import kernels  # noqa: F401 - registers the CUDA entries (no cuda-python needed)
from ggpy.backends.cuda.registry import KERNELS
from ggpy.test_backend_ops import all_cases, run_case

CASES = [c for c in all_cases() if "rope_kv" in c.id]


class TableOnly(Backend):
    """The CUDA kernel table without a device."""
    kind, kernels, fuse = "CUDA", KERNELS, True

    def __init__(self):
        super().__init__(None)


def _block(products_first: bool, read_cache: bool = False):
    """One token: q, k, v products of x, q and k roped at `pos`, k and v stored into F16 caches at `pos`, attended by
    flash_attn_ext; the products expanded into the graph before the rest (products_first, as a fused kernel writing
    them at the norm's turn would have them) or in the order attention reads them. read_cache: the V cache also read
    by another node."""
    ctx, hd = ggpy.Context(), 64
    x, pos = ctx.new_tensor(ggpy.F32, (256, 1)), ctx.new_tensor(ggpy.I32, (1,))
    kc, vc = (ctx.new_tensor(ggpy.F16, (hd * 2, 32)) for _ in range(2))
    mq, mk, mv = (ggpy.mul_mat(ctx.new_tensor(ggpy.Q8_0, (256, hd * h)), x) for h in (4, 2, 2))
    q, k = (ggpy.rope_ext(ggpy.reshape_3d(m, hd, m.ne[0] // hd, 1), pos, None, hd, 0, 4096, 1e4, 1.0, 0.0, 1.0, 32.0,
                          1.0) for m in (mq, mk))
    ks = ggpy.set_rows(kc, ggpy.reshape_2d(k, hd * 2, 1), pos)
    vs = ggpy.set_rows(vc, mv, pos)
    view = lambda c: ggpy.view_3d(c, hd, 32, 2, c.nb[1], hd * 2)  # noqa: E731
    out = ggpy.flash_attn_ext(ggpy.permute(q, 0, 2, 1, 3), view(ks), view(vs), None, 0.125)
    graph = ggpy.Graph()
    for t in (mq, mk, mv) if products_first else ():
        graph.build_forward_expand(t)
    if read_cache:
        out = ggpy.add(out, ggpy.sum(ggpy.cast(vc, ggpy.F32)))
    return graph.build_forward_expand(out)


def _found(graph):
    return sorted((f.pattern, tuple(n.op for n in f.computed)) for f in TableOnly().fusions(graph).values())


def test_rope_kv_where_k_and_v_are_ready_at_the_q_rope():
    assert _found(_block(True)) == [("rope_kv", ("rope", "rope", "set_rows", "set_rows"))]
    # k and v computed after the q rope: k's rope and store alone; a V cache read elsewhere: likewise
    assert _found(_block(False)) == _found(_block(True, read_cache=True)) == [("rope_set_rows", ("rope", "set_rows"))]


def test_rope_kv_cases_are_found():
    for case in CASES:
        found = _found(ggpy.Graph().build_forward_expand(case.build(ggpy.Context())))
        assert ("rope_kv", ("rope", "rope", "set_rows", "set_rows")) in found, case.id


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rope_kv_on_cuda_is_one_launch(cuda_backend, case):
    result = run_case(case, cuda_backend)
    assert result.ok, result.message
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
    names = [s.name for s in cuda_backend.program(graph)]
    assert any(n.endswith("+rope_kv") for n in names) and not any(n.startswith("set_rows") for n in names), names


def test_split_decode_attention_is_one_launch(cuda_backend, monkeypatch):
    """A token over 3000 F16 cache rows (keys split in chunks): one fa_vec launch that merges the chunks itself, the
    same values as with the separate fa_combine launch (no counters: COUNTERS = 0)."""
    import numpy as np

    from ggpy.backends.cuda.kernels import attention_flash

    def run():
        ctx, rng = ggpy.Context(), np.random.default_rng(7)
        q, k, v = (ctx.new_tensor(t, ne) for t, ne in ((ggpy.F32, (64, 1, 9)), (ggpy.F16, (64, 3000, 3)),
                                                        (ggpy.F16, (64, 3000, 3))))
        mask = ctx.new_tensor(ggpy.F16, (3000, 1))
        out = ggpy.flash_attn_ext(q, k, v, mask, 0.125)
        graph = ggpy.Graph().build_forward_expand(out)
        ggpy.GraphAllocator(cuda_backend).alloc_graph(graph)
        for t in (q, k, v, mask):
            t.set(rng.uniform(-1, 1, tuple(reversed(t.ne))) * (4 if t is mask else 1))
        cuda_backend.compute(graph)
        assert attention_flash.split(out)[3] > 1
        return out.numpy(), [s.name for s in cuda_backend.program(graph)]

    one, names = run()
    monkeypatch.setattr(attention_flash, "COUNTERS", 0)
    two, names_two = run()
    assert len(names) == 1 and len(names_two) == 2 and names_two[1].startswith("fa_combine"), (names, names_two)
    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7)
