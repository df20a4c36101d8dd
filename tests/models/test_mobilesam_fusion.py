"""The fusion pass on the MobileSAM encoder's F16 blocks (pointwise and depthwise convolutions with a bias and GELU)."""
import pytest

import ggpy
from ggpy.models.mobilesam.encoder import depthwise, pointwise
from ggpy.backends.kernel import Fused
from ggpy.graph.fusion import find_fusions


@pytest.mark.parametrize("cast", [False, True])
def test_fusion_pass_takes_a_cast_only_when_asked(cast):
    """Half-precision activations (the MobileSAM encoder with --dtype f16): product -> cast -> bias [-> act]. With
    cast=True the epilogue carries the cast (its kernel writes F16); without, the product runs alone (the CPU)."""
    ctx = ggpy.Context()
    t = ctx.new_tensor(ggpy.F16, (16, 9, 7, 2)).set_input()
    model = type("M", (), {"get": lambda self, name: weights[name]})()
    weights = {"p.weight": ctx.new_tensor(ggpy.F16, (1, 1, 16, 24)), "p.bias": ctx.new_tensor(ggpy.F16, (24,)),
               "d.weight": ctx.new_tensor(ggpy.F16, (3, 3, 1, 24)), "d.bias": ctx.new_tensor(ggpy.F16, (24,))}
    out = ggpy.gelu_erf(depthwise(model, "d", pointwise(model, "p", t, act=ggpy.gelu_erf)))
    graph = ggpy.Graph().build_forward_expand(out)
    spec = Fused(run=None, act=True, cast=cast)
    fusions = find_fusions(graph, lambda node, pattern: spec if pattern == "epilogue" else None).values()
    heads = sorted(f.head.op for f in fusions)
    assert heads == (["conv_2d_dw", "mul_mat"] if cast else [])
    for f in fusions:
        assert f.cast_node.op == "cast" and f.last.type == ggpy.F16 and f.act == "gelu_erf"
        assert f.name("k") == "k+f16+bias+gelu_erf"
