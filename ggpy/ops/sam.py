"""SAM's window and relative-position ops: win_part, win_unpart, get_rel_pos, add_rel_pos (ggml's SAM ops)."""
from __future__ import annotations

from ..errors import ShapeError
from ._common import check_contiguous, check_float, new_node


def win_part(a, w: int):
    """Split a batch of images into w x w windows, zero padding the right and bottom (SAM's window_partition).

    a.ne = (C, W, H, B) -> ne = (C, w, w, npx * npy * B) with npx = ceil(W / w), npy = ceil(H / w);
    window p = (b * npy + py) * npx + px: image b's windows are a contiguous run, batch outermost.
    """
    check_float("win_part", a)
    if w < 1:
        raise ShapeError(f"win_part: window size must be >= 1, got {w}")
    npx = (a.ne[1] + w - 1) // w
    npy = (a.ne[2] + w - 1) // w
    return new_node("win_part", a.type, (a.ne[0], w, w, npx * npy * a.ne[3]), [a], {"npx": npx, "npy": npy, "w": w})


def win_unpart(a, w0: int, h0: int, w: int):
    """Inverse of win_part: a.ne = (C, w, w, npx * npy * B) -> ne = (C, w0, h0, B), padding dropped."""
    check_float("win_unpart", a)
    n = ((w0 + w - 1) // w) * ((h0 + w - 1) // w)
    if a.ne[1] != w or a.ne[2] != w or a.ne[3] % n:
        raise ShapeError(f"win_unpart: a ne={a.ne} does not hold B images of {w0}x{h0} in {n} windows of {w}x{w} "
                         f"each; expected ne=({a.ne[0]}, {w}, {w}, B * {n}), ne[3] a multiple of {n}")
    return new_node("win_unpart", a.type, (a.ne[0], w0, h0, a.ne[3] // n), [a], {"w": w})


def get_rel_pos(a, qh: int, kh: int):
    """Relative position embeddings for SAM's attention: a.ne = (C, 2 * max(qh, kh) - 1);
    result ne = (C, kh, qh) with result[q, k, :] = a[(kh - 1 - k) + q, :]. qh must equal kh (as ggml)."""
    check_float("get_rel_pos", a)
    if qh != kh:
        raise ShapeError(f"get_rel_pos: qh={qh} and kh={kh} must be equal")
    if a.ne[1] != 2 * max(qh, kh) - 1 or a.ne[2] != 1 or a.ne[3] != 1:
        raise ShapeError(f"get_rel_pos: a ne={a.ne} expected ({a.ne[0]}, {2 * max(qh, kh) - 1}, 1, 1)")
    return new_node("get_rel_pos", a.type, (a.ne[0], kh, qh), [a], {"qh": qh, "kh": kh})


def add_rel_pos(a, pw, ph):
    """Add decomposed relative position biases to attention scores (SAM).

    a.ne = (KW * KH, QW * QH, B) contiguous scores; pw.ne = ph.ne = (K, QW, QH, B) with K = KW = KH.
    a[b, qh, qw, kh, kw] += ph[b, qh, qw, kh] + pw[b, qh, qw, kw]. ne = a.ne.
    """
    check_float("add_rel_pos", a, pw, ph)
    check_contiguous("add_rel_pos", a)
    if pw.ne != ph.ne:
        raise ShapeError(f"add_rel_pos: pw ne={pw.ne} and ph ne={ph.ne} must have the same shape")
    if (pw.ne[0] * pw.ne[0] != a.ne[0] or pw.ne[1] * pw.ne[2] != a.ne[1] or pw.ne[3] != a.ne[2] * a.ne[3]):
        raise ShapeError(f"add_rel_pos: a ne={a.ne} does not fit pw ne={pw.ne}; expected a.ne = "
                         f"({pw.ne[0] ** 2}, {pw.ne[1] * pw.ne[2]}, {pw.ne[3]})")
    return new_node("add_rel_pos", a.type, a.ne, [a, pw, ph])
