"""Node fusion for the CPU backend: patterns of the planned graph that one kernel runs at once.

The graph and its memory plan are untouched; at program time the head node of a pattern is bound to a
fused kernel that writes the pattern's last output, and the other nodes are skipped. Only intermediates
nobody else reads are fused away.

Epilogues: a head (mul_mat, or a channels-contiguous conv_2d_dw), then add(bias over ne[0]) and optionally
an activation; or a norm followed by mul(weight) and add(bias) over ne[0] (LayerNorm's affine). The kernel applies them to each block of output rows right after computing it, while the
rows are in cache, instead of two more passes over memory. Between a conv_2d_dw head and its add there
may be views that keep the memory order (the permute back to the (C, W, H) token layout, reshapes).
Opt-in (find_fusions(residual=True), the CUDA backend): after a mul_mat's bias add, an add of a residual
operand of the same shape (through reshapes), run as the GEMM's C matrix.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...graph.tensor import Tensor
from ...types import F32

EPILOGUE_ACTS = ("gelu", "gelu_erf", "gelu_quick", "relu", "silu", "sigmoid", "tanh")
VIEW_OPS = ("view", "reshape", "permute", "transpose")


@dataclass
class Epilogue:
    """`head`, then `add_node` (+ bias over ne[0]) and optionally `act_node` (an activation); for a norm head,
    `scale_node` (x weight over ne[0]) comes between the head and the add."""
    head: Tensor
    add_node: Tensor
    act_node: Tensor | None = None
    scale_node: Tensor | None = None
    views: tuple = ()          # same-order views between a conv_2d_dw head and its add
    residual_node: Tensor | None = None     # mul_mat heads, find_fusions(residual=True): add(bias out, r)
    residual_views: tuple = ()              # same-order views between the bias add and the residual add

    @property
    def bias(self) -> Tensor:
        return self.add_node.src[1]

    @property
    def scale(self) -> Tensor | None:
        return None if self.scale_node is None else self.scale_node.src[1]

    @property
    def act(self) -> str | None:
        return None if self.act_node is None else self.act_node.op

    @property
    def residual(self) -> Tensor | None:
        """The residual operand r of residual_node (the same shape and layout as its result)."""
        if self.residual_node is None:
            return None
        a, b = self.residual_node.src[:2]
        return b if a is self.add_node or any(a is v for v in self.residual_views) else a

    @property
    def nodes(self) -> list:
        """The nodes whose memory the fused result goes through, in order (views left out)."""
        return [n for n in (self.head, self.scale_node, self.add_node, self.residual_node, self.act_node)
                if n is not None]

    @property
    def last(self) -> Tensor:
        """The node whose memory receives the fused result."""
        return self.nodes[-1]

    @property
    def skipped(self) -> list:
        """The nodes after the head that the fused kernel computes (views in between included)."""
        return list(self.views) + list(self.residual_views) + self.nodes[1:]

    def name(self, head_kernel: str) -> str:
        return (head_kernel + ("+scale" if self.scale_node is not None else "") + "+bias"
                + ("+residual" if self.residual_node is not None else "") + (f"+{self.act}" if self.act else ""))


def fusion_stamp(graph) -> tuple:
    """What find_fusions depends on besides the graph's nodes: which of them are outputs (never fused away)."""
    return tuple(id(n) for n in graph.nodes if n.is_output)


def consumers(graph) -> dict:
    """{id(tensor): [nodes reading it]} over the graph's nodes."""
    users = {}
    for node in graph.nodes:
        for s in node.src:
            if s is not None:
                users.setdefault(id(s), []).append(node)
    return users


def _only_user(node, users):
    """The single node reading `node` (a view of it counts as a reader), or None; None for outputs."""
    if node.is_output:
        return None
    readers = users.get(id(node), [])
    return readers[0] if len(readers) == 1 else None


def only_user(node, users):
    """The single node reading `node` (views count as readers; None for outputs and several readers), with
    `users` from consumers(graph): for backends matching patterns of their own."""
    return _only_user(node, users)


def _same_order_view(view, head) -> bool:
    """A view that reads head's memory from its start in memory order (contiguous strides)."""
    return (view is head or (view.view_src is head and view.view_offs == 0 and view.is_contiguous()
                             and view.nelements == head.nelements))


def _is_row_vector(v, node) -> bool:
    """A contiguous F32 vector ne = (node.ne[0],) broadcast over every row of node."""
    return v.type == F32 and v.ne == (node.ne[0], 1, 1, 1) and v.nb[0] == 4


def _add_after(head, users, keep_order: bool, op: str = "add"):
    """(the `op` node reading head directly (or, with keep_order, through same-order views), the views in
    between), or (None, ())."""
    node, views = head, []
    while True:
        user = _only_user(node, users)
        if user is None:
            return None, ()
        if user.op == op:
            ok = user.src[0] is node and (node is head or keep_order)
            return (user, tuple(views)) if ok else (None, ())
        if not keep_order or user.op not in VIEW_OPS:
            return None, ()
        views.append(user)
        node = user


def _residual_after(add, users):
    """(the add reading `add`'s result (directly or through same-order views) and a second operand of the same
    shape, both contiguous F32, the views in between), or (None, ())."""
    node, views = add, []
    while True:
        user = _only_user(node, users)
        if user is None:
            return None, ()
        if user.op == "add":
            a, b = user.src[:2]
            other = b if a is node else a if b is node else None
            ok = (other is not None and other is not node and other.type == F32 and user.type == F32
                  and other.ne == user.ne and other.is_contiguous() and user.is_contiguous()
                  and user.nelements == add.nelements)
            return (user, tuple(views)) if ok else (None, ())
        if user.op not in ("view", "reshape") or not _same_order_view(user, add):
            return None, ()
        views.append(user)
        node = user


def find_fusions(graph, fusable_head, residual: bool = False) -> dict:
    """{id(head): Epilogue} for every fusable pattern of `graph`. fusable_head(node) says whether the
    backend has an epilogue kernel for the node (mul_mat; conv_2d_dw when it runs channels-contiguous; norm).
    residual=True also finds, after a mul_mat's bias add with no activation, an add of a residual operand
    of the same shape (Epilogue.residual_node; a GEMM's C matrix with beta = 1)."""
    users = consumers(graph)
    position = {id(n): i for i, n in enumerate(graph.nodes)}

    def ready(v) -> bool:       # the fused kernel runs at the head's turn: operands must be ready by then
        return position.get(id(v), -1) < position[id(node)]

    fusions = {}
    for node in graph.nodes:
        if node.op not in ("mul_mat", "conv_2d_dw", "norm") or not fusable_head(node):
            continue
        scale = None
        if node.op == "norm":
            scale, _ = _add_after(node, users, keep_order=False, op="mul")
            if scale is None or not _is_row_vector(scale.src[1], node) or not ready(scale.src[1]):
                continue
        channels_first = node.op == "conv_2d_dw"
        add, views = _add_after(scale or node, users, keep_order=channels_first)
        if add is None or add.type != F32 or add.nelements != node.nelements:
            continue
        if channels_first and not (_same_order_view(add.src[0], node) and add.ne[0] == node.ne[2]):
            continue
        if not channels_first and add.ne != node.ne:
            continue
        if not _is_row_vector(add.src[1], add) or not ready(add.src[1]):
            continue
        fused = Epilogue(node, add, scale_node=scale, views=views)
        act = _only_user(add, users)
        if act is not None and act.op in EPILOGUE_ACTS and act.src[0] is add and act.type == F32:
            fused.act_node = act
        elif residual and node.op == "mul_mat" and add.is_contiguous():
            fused.residual_node, fused.residual_views = _residual_after(add, users)
            if fused.residual_node is not None and not ready(fused.residual):
                fused.residual_node, fused.residual_views = None, ()
        fusions[id(node)] = fused
    return fusions
