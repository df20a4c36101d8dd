"""Node fusion for the CPU backend: patterns of the planned graph that one kernel runs at once.

The graph and its memory plan are untouched; at program time the head node of a pattern is bound to a
fused kernel that writes the pattern's last output, and the other nodes are skipped. Only intermediates
nobody else reads are fused away.

mul_mat -> add(bias) [-> activation]: the bias (ne = (M,)) and activation are applied to each block of
output rows right after its sgemm, while the rows are in cache, instead of two more passes over memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...graph.tensor import Tensor
from ...types import F32

EPILOGUE_ACTS = ("gelu", "gelu_erf", "gelu_quick", "relu", "silu", "sigmoid", "tanh")


@dataclass
class MatmulEpilogue:
    """mul_mat `head`, then `add_node` (+ `bias`) and optionally `act_node` (activation `act`)."""
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
    def last(self) -> Tensor:
        """The node whose memory receives the fused result."""
        return self.act_node or self.add_node

    @property
    def skipped(self) -> list:
        """The nodes after the head that the fused kernel computes."""
        return [n for n in (self.add_node, self.act_node) if n is not None]

    @property
    def name(self) -> str:
        return "blas_sgemm+bias" + (f"+{self.act}" if self.act else "")


def _consumers(graph) -> dict:
    users = {}
    for node in graph.nodes:
        for s in node.src:
            if s is not None:
                users.setdefault(id(s), []).append(node)
    return users


def _is_bias_for(bias, node) -> bool:
    """A contiguous F32 row vector ne = (node.ne[0], 1, 1, 1) broadcast over every row of node."""
    return (bias is not None and bias.type == F32 and bias.ne == (node.ne[0], 1, 1, 1)
            and bias.nb[0] == 4)


def _only_user(node, users):
    """The single node reading `node` (a view of it counts as a reader), or None; None for outputs."""
    if node.is_output:
        return None
    readers = users.get(id(node), [])
    return readers[0] if len(readers) == 1 else None


def find_fusions(graph) -> dict:
    """{id(head): MatmulEpilogue} for every fusable pattern of `graph`."""
    users = _consumers(graph)
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    fusions = {}
    for node in graph.nodes:
        if node.op != "mul_mat":
            continue
        add = _only_user(node, users)
        if add is None or add.op != "add" or add.src[0] is not node or add.ne != node.ne or add.type != F32:
            continue
        bias = add.src[1]
        if not _is_bias_for(bias, node) or position.get(id(bias), -1) > position[id(node)]:
            continue            # the fused kernel runs at the head's turn: the bias must be ready by then
        fused = MatmulEpilogue(node, add)
        act = _only_user(add, users)
        if act is not None and act.op in EPILOGUE_ACTS and act.src[0] is add and act.type == F32:
            fused.act_node = act
        fusions[id(node)] = fused
    return fusions
