"""SAM's window and relative-position kernels: win_part, win_unpart, get_rel_pos (row copies) and add_rel_pos.

Arrays are numpy views of shape (ne3, ne2, ne1, ne0) with any strides; F16 arrives as uint16 bits.
"""
import numpy as np

from ..registry import BoundNode, register
from .common import block, kernel, launch, row_index
from .fp16 import load, store
from .convert import convert

WINDOW_CODES = {"win_part": 0, "win_unpart": 1, "get_rel_pos": 2}


@kernel
def window_rows(op, w, npx, nwin, d, a, ith, nth):
    """Each row of d copied from one row of a (or zeroed), row by row; nwin = npx * npy windows per image:

    win_part (0):    d (B * nwin, w, w, C) from a (B, H, W, C); window b * nwin + py * npx + px, zeros past the image;
    win_unpart (1):  d (B, H, W, C) from a (B * nwin, w, w, C);
    get_rel_pos (2): d (1, qh, kh, C) from a (1, 1, 2 * kh - 1, C); d[0, q, k] = a[0, 0, kh - 1 - k + q].
    """
    ne3, ne2, ne1, ne0 = d.shape
    na2, na1 = a.shape[1], a.shape[2]
    zero = store(np.float32(0.0), d.dtype)
    r0, r1 = block(ne3 * ne2 * ne1, ith, nth)
    for r in range(r0, r1):
        i3, i2, i1 = row_index(r, ne2, ne1)
        drow = d[i3, i2, i1]
        if op == 0:
            p = i3 % nwin
            j3, j2, j1 = i3 // nwin, (p // npx) * w + i2, (p % npx) * w + i1
        elif op == 1:
            j3, j2, j1 = i3 * nwin + (i2 // w) * npx + i1 // w, i2 % w, i1 % w
        else:
            j3, j2, j1 = 0, 0, ne1 - 1 - i1 + i2
        if j2 >= na2 or j1 >= na1:
            for i0 in range(ne0):
                drow[i0] = zero
            continue
        arow = a[j3, j2, j1]
        for i0 in range(ne0):
            drow[i0] = convert(arow[i0], drow.dtype)


@register(*WINDOW_CODES)
def bind_window(b: BoundNode):
    node = b.node
    w = node.op_params.get("w", 1)
    image = node if node.op == "win_unpart" else node.src[0]      # (C, W, H, B): the image side of the windows
    npx, npy = (image.ne[1] + w - 1) // w, (image.ne[2] + w - 1) // w
    args = (WINDOW_CODES[node.op], w, npx, npx * npy, b.dst, b.srcs[0])
    return launch(window_rows, args, b.threads_for(b.dst.size))


@kernel
def add_rel_pos_rows(d, a, pw, ph, ith, nth):
    """d[b, y, x, kh, kw] = a[b, y, x, kh, kw] + ph[b, y, x, kh] + pw[b, y, x, kw]; pw, ph (B, QH, QW, K).

    Each element of a is read before the same element of d is written, so d may be a (in place).
    """
    nb, qh, qw, k = pw.shape
    r0, r1 = block(nb * qh * qw * k, ith, nth)
    for r in range(r0, r1):
        ib = r // (qh * qw * k)
        iy = (r // (qw * k)) % qh
        ix = (r // k) % qw
        ik = r % k
        drow = d[ib, iy, ix, ik]
        arow = a[ib, iy, ix, ik]
        pwrow = pw[ib, iy, ix]
        h = load(ph[ib, iy, ix, ik])
        for i0 in range(k):
            drow[i0] = store(load(arow[i0]) + h + load(pwrow[i0]), drow.dtype)


@register("add_rel_pos")
def bind_add_rel_pos(b: BoundNode):
    pw, ph = b.srcs[1], b.srcs[2]
    shape = pw.shape + (pw.shape[3],)
    args = (b.dst.reshape(shape), b.srcs[0].reshape(shape), pw, ph)
    return launch(add_rel_pos_rows, args, b.threads_for(b.dst.size))
