"""Cases for SAM's window and relative-position ops: win_part, win_unpart, get_rel_pos, add_rel_pos."""
from __future__ import annotations

from ... import ops
from ...types import F16, F32
from ..harness import OpCase
from .util import LAYOUTS, TYPES, layout, leaf


def _the_input(node, leafs):
    """A round trip gives its one input back."""
    (value,) = leafs.values()
    return value


def _win_cases():
    out = []
    for t in TYPES:
        for c, w0, h0, w, b in ((5, 13, 9, 4, 1), (3, 8, 8, 4, 1), (2, 7, 10, 3, 1), (3, 7, 5, 3, 2), (2, 5, 11, 4, 3),
                                (3, 6, 9, 3, 3), (8, 13, 9, 4, 2), (12, 7, 10, 3, 1), (4, 5, 11, 4, 3)):   # C % 4 == 0:
            # CUDA's four-channel kernels
            ne, nw = (c, w0, h0, b), ((w0 + w - 1) // w) * ((h0 + w - 1) // w) * b
            p = f"{t.name},C={c},W={w0},H={h0},w={w},B={b}"
            out.append(OpCase("win_part", p, lambda ctx, t=t, ne=ne, w=w: ops.win_part(leaf(ctx, t, ne), w)))
            out.append(OpCase("win_unpart", p + ",round_trip", lambda ctx, t=t, ne=ne, w=w: ops.win_unpart(
                ops.win_part(leaf(ctx, t, ne), w), ne[1], ne[2], w), reference=_the_input))
            out.append(OpCase("win_unpart", p, lambda ctx, t=t, ne=ne, w=w, nw=nw: ops.win_unpart(
                leaf(ctx, t, (ne[0], w, w, nw)), ne[1], ne[2], w)))
        for how in LAYOUTS[1:]:
            for b in (1, 2):
                p = f"{t.name},{how},C=5,W=13,H=9,w=4,B={b}"
                out.append(OpCase("win_part", p, lambda ctx, t=t, how=how, b=b: ops.win_part(
                    layout(ctx, t, (5, 13, 9, b), how), 4)))
                out.append(OpCase("win_unpart", p, lambda ctx, t=t, how=how, b=b: ops.win_unpart(
                    layout(ctx, t, (5, 4, 4, 12 * b), how), 13, 9, 4)))
    return out


def _rel_pos_cases():
    out = []
    for t in (F32, F16):
        for c, k in ((6, 7), (3, 1), (8, 4)):
            out.append(OpCase("get_rel_pos", f"{t.name},C={c},qh=kh={k}", lambda ctx, t=t, c=c, k=k: ops.get_rel_pos(
                leaf(ctx, t, (c, 2 * k - 1)), k, k)))
        for how in LAYOUTS[1:]:
            out.append(OpCase("get_rel_pos", f"{t.name},{how},C=6,qh=kh=7", lambda ctx, t=t, how=how: ops.get_rel_pos(
                layout(ctx, t, (6, 13), how), 7, 7)))
        for tp in (F32, F16):
            for k, qw, qh, nb in ((4, 4, 4, 3), (3, 5, 2, 2), (2, 3, 7, 1)):
                out.append(OpCase("add_rel_pos", f"a={t.name},p={tp.name},K={k},QW={qw},QH={qh},B={nb}",
                                  lambda ctx, t=t, tp=tp, k=k, qw=qw, qh=qh, nb=nb: ops.add_rel_pos(
                                      leaf(ctx, t, (k * k, qw * qh, nb)), leaf(ctx, tp, (k, qw, qh, nb)),
                                      leaf(ctx, tp, (k, qw, qh, nb)))))
    for how in LAYOUTS[1:]:
        out.append(OpCase("add_rel_pos", f"f32,pw={how},ph={how},K=3,QW=5,QH=2,B=2", lambda ctx, how=how:
                          ops.add_rel_pos(leaf(ctx, F32, (9, 10, 2)), layout(ctx, F32, (3, 5, 2, 2), how),
                                          layout(ctx, F32, (3, 5, 2, 2), how))))
    out.append(OpCase("add_rel_pos", "f32,a=(9,10,2,3),K=3,QW=5,QH=2,B=6", lambda ctx: ops.add_rel_pos(
        leaf(ctx, F32, (9, 10, 2, 3)), leaf(ctx, F32, (3, 5, 2, 6)), leaf(ctx, F32, (3, 5, 2, 6)))))
    return out


def cases():
    return _win_cases() + _rel_pos_cases()
