"""q8_1 hand-offs: a generated token's attention output written as the quantized activations of the mat-vec after it.

A quantized mat-vec (mmvq, quant.py) reads its activations as q8_1 blocks, which a quantize_q8_1 launch makes from
F32 in its temp block. Where flash_attn_ext's output (D, H) for one query row, merged in a cluster
(attention_flash.writes_q8), is read only, through same-order views, as b of such a two-launch product (the o
projection: the 1B's K = 2048, too long to quantize in every block), the attention kernel writes those blocks into
its own memory (H D int8, then H D / 32 (d, d sum q) float pairs: 1.25 of its 4 H D bytes) and the product reads
them there: one launch less a layer, the same values. The graph and its plan are untouched; the attention's F32
output is never written (it is no output and has no other reader). On with the backend's `fuse`.
"""
from __future__ import annotations

from ....optable import is_view
from . import attention_flash, quant


def _single_reader_chain(p, b, users) -> bool:
    """Whether b is p or a chain of views from p in memory order, each link (p too) read only by the next (b by one
    node) and none an output."""
    t = b
    while t is not p:
        if not is_view(t) or t.src[0] is None or t.view_offs != 0 or not t.is_contiguous() or t.nelements != p.nelements:
            return False
        t = t.src[0]
    node = b
    while True:
        readers = users.get(id(node), [])
        if node.is_output or len(readers) != 1:
            return False
        if node is p:
            return True
        node = node.src[0]


def _producer(b):
    while is_view(b) and b.src and b.src[0] is not None:
        b = b.src[0]
    return b


def reads_q8(m) -> bool:
    """Whether mul_mat m runs as a two-launch mmvq of one column (quantize_q8_1, then the product) that could read
    its b already quantized."""
    a, b = m.src[:2]
    return (quant.mmvq_fits(m) and not quant.mmvq_batch(m) and not quant.mmvq_shared(m) and quant.mmvq_aligned(a)
            and b.nelements == b.ne[0] and b.is_contiguous())


def find(backend, graph, users) -> set:
    """{id(flash_attn_ext node)} of the graph's attention outputs handed to their mat-vec as q8_1 blocks."""
    out = set()
    for m in graph.nodes:
        if m.op != "mul_mat" or backend.impl_for(m) != "mmvq" or not backend.on_device(m, *m.src[:2]):
            continue
        p = _producer(m.src[1])
        if (p.op == "flash_attn_ext" and backend.on_device(p) and backend.entry(p) is not None
                and attention_flash.writes_q8(p, backend.impl_for(p), backend) and reads_q8(m)
                and _single_reader_chain(p, m.src[1], users)):
            out.add(id(p))
    return out


def quantized_b(backend, m) -> int | None:
    """The address of m's b as q8_1 blocks when its producer writes them (find), else None."""
    return quant.tensor_ptr(m.src[1]) if id(_producer(m.src[1])) in backend.q8_handoffs else None
