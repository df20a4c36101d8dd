"""The rope_kv pattern (ggpy/graph/fusion.py, run by CUDA's rope entry: kernels/rope.py), the norm_rope_kv pattern
(the q, k, v products of an RMSNorm and their rope_kv: CUDA's norm_mmvq_rope, kernels/matmul.py) and fa_vec's
one-launch merge of its key chunks (kernels/attention_flash.py). Without a GPU: where the fusion pass finds rope_kv and
norm_rope_kv through the CUDA kernel table (the k and v products ready at the q rope's turn, e.g. written early by
norm_mat_vec; each cache read by its set_rows alone); the planner giving the q rope its block at the norm's turn (the
CPU declaring norm_rope_kv, its nodes run one by one). On a GPU: the test-backend-ops cases ran as one launch, values
against float64 and norm_rope_kv's bits against norm_mmvq then rope_kv; a split decode attention is one launch."""
import numpy as np
import pytest

import ggpy
from ggpy.backends.base import Backend
from ggpy.backends.cuda import kernels  # noqa: F401 - registers the CUDA entries (no cuda-python needed)
from ggpy.backends.cuda.registry import KERNELS
from ggpy.backends.kernel import Fused
from ggpy.test_backend_ops import all_cases, run_case
from ggpy.test_backend_ops.harness import _build

CASES = [c for c in all_cases() if "fused,rope_kv" in c.id]
NORM_CASES = [c for c in all_cases() if "fused,norm+rope_kv" in c.id]
NORM_ROPE_KV = ("norm_rope_kv", ("rms_norm", "mul", "mul_mat", "mul_mat", "mul_mat", "rope", "rope", "set_rows",
                                 "set_rows"))


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


def test_norm_rope_kv_cases_are_found():
    for case in NORM_CASES:
        assert _found(ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))) == [NORM_ROPE_KV], case.id


def test_norm_rope_kv_needs_q_k_v_read_by_the_rope_kv_alone():
    """Products in graph order v, k, q: norm_mat_vec then rope_kv (two launches); a k product read by another node
    too: no norm_rope_kv."""
    case = NORM_CASES[0]
    out = case.build(ggpy.Context())
    g = ggpy.Graph().build_forward_expand(out)
    q, k, v = [n for n in g.nodes if n.op == "mul_mat"]
    reordered = ggpy.Graph()
    for t in (v, k):
        reordered.build_forward_expand(t)
    assert [p for p, _ in _found(reordered.build_forward_expand(out))] == ["norm_mat_vec", "rope_kv"]
    shared = ggpy.concat(out, ggpy.reshape_1d(k, k.nelements), 0)
    assert NORM_ROPE_KV not in _found(ggpy.Graph().build_forward_expand(shared))


class Declines(ggpy.CPUBackend):
    """The CPU declaring norm_rope_kv (found, the q rope planned at the norm's turn) whose kernel declines."""

    def fused(self, node, pattern):
        return Fused(lambda bound, f: None) if pattern == "norm_rope_kv" else super().fused(node, pattern)

    def fused_kernel(self, fusion):
        return Fused(lambda bound, f: None) if fusion.pattern == "norm_rope_kv" else super().fused_kernel(fusion)


@pytest.mark.parametrize("case", NORM_CASES[:2], ids=lambda c: c.id)
def test_planner_gives_the_q_rope_its_block_at_the_norms_turn(case):
    backend = Declines(n_threads=2)
    result = run_case(case, backend)
    assert result.ok, result.message
    graph = ggpy.Graph().build_forward_expand(case.build(ggpy.Context()))
    ggpy.GraphAllocator(backend).alloc_graph(graph)
    (f,) = [f for f in backend.fusions(graph).values() if f.pattern == "norm_rope_kv"]
    starts = {b.what: b.start for b in graph.plan.blocks}
    assert starts[f"rope #{len(graph.leafs) + graph.nodes.index(f.kv.head)}"] == 3 * graph.nodes.index(f.head)


@pytest.mark.parametrize("case", NORM_CASES, ids=[c.id for c in NORM_CASES])
def test_norm_rope_kv_on_cuda_is_one_launch_of_the_unfused_bits(cuda_backend, case):
    """One launch for the norm, the products, the ropes and both stores (two for products too big for each block to
    quantize x: rms_norm_mul_q8_1, then mmvq_rope), against float64, and the same bits as norm_mat_vec's kernels then
    rope_kv (the same norm, dot products and rope_cos_sin)."""
    from ggpy.backends.cuda import CUDABackend

    class Pair(CUDABackend):
        def fused(self, node, pattern):
            return None if pattern == "norm_rope_kv" else super().fused(node, pattern)

    result = run_case(case, cuda_backend)
    assert result.ok, result.message
    runs = []
    for backend in (cuda_backend, Pair("cuda")):
        graph, _, out = _build(case, backend, 0)
        backend.compute(graph)
        runs.append(([s.name for s in backend.program(graph)], out.numpy()))
    (fused, one), (pair, two) = runs
    ours = ["rms_norm_f32+mul+mat_vec3+rope_kv"] + (["mmvq_rope"] if "K=2048" in case.id else [])    # x quantized once
    assert fused[:len(ours)] == ours and not any(n.startswith(("rope", "set_rows", "mmvq")) for n in fused[len(ours):]), fused
    assert pair[0].endswith("+mat_vec3") and any(n.endswith("+rope_kv") for n in pair), pair
    np.testing.assert_array_equal(one, two)


def test_split_decode_attention_is_one_launch(cuda_backend, monkeypatch):
    """A token over 3000 F16 cache rows (keys split in chunks merged through memory: no clusters, DEC_CLUSTERS
    empty): one launch that merges the chunks itself, the same values as with the separate fa_combine launch (no
    counters: COUNTERS = 0)."""
    import numpy as np

    from ggpy.backends.cuda.kernels import attention_flash

    monkeypatch.setattr(attention_flash, "DEC_CLUSTERS", ())

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
