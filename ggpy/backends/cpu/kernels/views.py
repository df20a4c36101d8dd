"""Ops that only change how memory is seen: nothing to compute."""
from ..registry import BoundNode, register

VIEW_OPS = ("view", "reshape", "permute", "transpose")


@register(*VIEW_OPS)
def bind_view(b: BoundNode):
    return None
