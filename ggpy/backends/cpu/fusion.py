"""Node fusion for the CPU backend: patterns of the planned graph that one kernel runs at once.

The graph and its memory plan are untouched; at program time the head node of a pattern is bound to a
fused kernel that writes the pattern's last output, and the other nodes are skipped. Only intermediates
nobody else reads are fused away.

Epilogues: a head (mul_mat, or a channels-contiguous conv_2d_dw), then add(bias over ne[0]) and optionally
an activation. The kernel applies them to each block of output rows right after computing it, while the
rows are in cache, instead of two more passes over memory. Between a conv_2d_dw head and its add there
may be views that keep the memory order (the permute back to the (C, W, H) token layout, reshapes).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...graph.tensor import Tensor
from ...types import F32

EPILOGUE_ACTS = ("gelu", "gelu_erf", "gelu_quick", "relu", "silu", "sigmoid", "tanh")
VIEW_OPS = ("view", "reshape", "permute", "transpose")


@dataclass
class Epilogue:
    """`head`, then `add_node` (+ bias over ne[0]) and optionally `act_node` (an activation)."""
    head: Tensor
    add_node: Tensor
    act_node: Tensor | None = None

    @property
    def bias(self) -> Tensor:
        return self.add_node.src[1]

    @property
    def act(self) -> str | None:
        return None if self.act_node is None else self.act_node.op

    @property
    def nodes(self) -> list:
        """Head, add and activation: the nodes whose memory the fused result goes through."""
        return [self.head, self.add_node] + ([self.act_node] if self.act_node is not None else [])

    @property
    def last(self) -> Tensor:
        """The node whose memory receives the fused result."""
        return self.act_node or self.add_node

    def skipped(self, users: dict) -> list:
        """The nodes after the head that the fused kernel computes (views in between included)."""
        chain, node = [], self.head
        while node is not self.add_node:
            node = users[id(node)][0]
            chain.append(node)
        return chain + ([self.act_node] if self.act_node is not None else [])

    def name(self, head_kernel: str) -> str:
        return f"{head_kernel}+bias" + (f"+{self.act}" if self.act else "")


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


def _is_contiguous(t) -> bool:
    nb = t.type.size
    for ne, stride in zip(t.ne, t.nb):
        if ne > 1 and stride != nb:
            return False
        nb *= ne
    return True


def _same_order_view(view, head) -> bool:
    """A view that reads head's memory from its start in memory order (contiguous strides)."""
    return (view is head or (view.view_src is head and view.view_offs == 0 and _is_contiguous(view)
                             and view.nelements == head.nelements))


def _add_after(head, users, keep_order: bool):
    """The add reading head directly (or, with keep_order, through same-order views), or None."""
    node = head
    while True:
        user = _only_user(node, users)
        if user is None:
            return None
        if user.op == "add":
            return user if user.src[0] is node and (node is head or keep_order) else None
        if not keep_order or user.op not in VIEW_OPS:
            return None
        node = user


def find_fusions(graph, fusable_head) -> dict:
    """{id(head): Epilogue} for every fusable pattern of `graph`. fusable_head(node) says whether the
    backend has an epilogue kernel for the node (mul_mat; conv_2d_dw when it runs channels-contiguous)."""
    users = consumers(graph)
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    fusions = {}
    for node in graph.nodes:
        if node.op not in ("mul_mat", "conv_2d_dw") or not fusable_head(node):
            continue
        channels_first = node.op == "conv_2d_dw"
        add = _add_after(node, users, keep_order=channels_first)
        if add is None or add.type != F32 or add.nelements != node.nelements:
            continue
        if channels_first and not (_same_order_view(add.src[0], node) and add.ne[0] == node.ne[2]):
            continue
        if not channels_first and add.ne != node.ne:
            continue
        bias = add.src[1]
        if not (bias.type == F32 and bias.ne == (add.ne[0], 1, 1, 1) and bias.nb[0] == 4):
            continue
        if position.get(id(bias), -1) > position[id(node)]:
            continue            # the fused kernel runs at the head's turn: the bias must be ready by then
        fused = Epilogue(node, add)
        act = _only_user(add, users)
        if act is not None and act.op in EPILOGUE_ACTS and act.src[0] is add and act.type == F32:
            fused.act_node = act
        fusions[id(node)] = fused
    return fusions
