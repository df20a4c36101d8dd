"""float64 numpy references for every op, one module per op family, written from ggml's documented semantics.

Each takes the node (for its op_params) and its sources as float64 arrays of shape reversed(ne)
(4-d: (ne3, ne2, ne1, ne0)) and returns the expected output in the same 4-d layout.
"""
import importlib

import numpy as np

from ...graph import Graph
from ...optable import OPS, is_view
from .common import REFERENCES

for _family in dict.fromkeys(op.family for op in OPS.values() if not op.view):
    importlib.import_module(f"{__name__}.{_family}")

__all__ = ["REFERENCES", "evaluate"]


def evaluate(out_node, leaf_values: dict) -> np.ndarray:
    """out_node's value computed in float64 by the references of every node from the leafs' values ({id(leaf):
    array of shape reversed(ne)}): the reference of a pattern a backend may fuse. Every tensor's value lives in
    a float64 copy of its memory (elements at its strides), so views see what their source's layout holds."""
    graph = Graph()
    graph.build_forward_expand(out_node)
    memory, values = {}, {}

    def store(t, value):
        memory[id(t)] = np.zeros(max(1, t.nelements if t.type.quantized else t.nbytes // t.type.size))
        _strided(t, memory[id(t)])[...] = value

    for leaf in graph.leafs:
        store(leaf, leaf_values[id(leaf)])
    for node in graph.nodes:
        if is_view(node):
            values[id(node)] = _strided(node, memory[id(node.view_src)], node.view_offs).copy()
            continue
        srcs = [None if s is None else values[id(s)] if id(s) in values else _strided(s, memory[id(s)])
                for s in node.src]
        value = np.asarray(REFERENCES[node.op](node, srcs), np.float64)
        values[id(node)] = value
        if node.view_src is not None:        # cpy: the copy lands in its destination's memory
            _strided(node, memory[id(node.view_src)], node.view_offs)[...] = value
        else:
            store(node, value)
    return values[id(out_node)]


def _strided(t, mem, offset: int = 0):
    """t's elements in `mem` (float64, one element per element of t's type) at t's strides, shape reversed(ne); a
    quantized tensor's (blocks have no element strides) in order, viewed whole only."""
    if t.type.quantized:
        if offset or not t.is_contiguous():
            raise NotImplementedError(f"evaluate: a part of a {t.type.name} tensor (ne={t.ne}, offset {offset})")
        return mem[:t.nelements].reshape(tuple(reversed(t.ne)))
    size = t.type.size
    return np.lib.stride_tricks.as_strided(mem[offset // size:], tuple(reversed(t.ne)),
                                           tuple(8 * nb // size for nb in reversed(t.nb)))
