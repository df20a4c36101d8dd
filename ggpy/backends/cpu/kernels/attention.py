"""flash_attn_ext: every query head of a token streams the key/value rows of its KV head once, in tiles of TILE keys with
an online softmax (running max and sum, the accumulator rescaled when the max grows), as ggml's CPU kernel; float32
throughout (q is not rounded to K's type). K and V are F32, F16, BF16 or Q8_0 (ggml's blocks of 32: f16 scale, 32
int8), each row converted to float32 once. A key's rows of all KV heads are read together (they lie side by side in a
KV cache: each cache line fetched is used at once).

A query row reads only its live span: the keys from the first to the last one its mask lets through for some head,
found by a vectorised scan of the mask rows from both ends (_live_span: the cache rows past the context, the future of
a causal mask, the other sequences' ranges of a server's batch, what lies outside a sliding window are never read);
inside it, keys whose mask is -inf for every query head are skipped unread. Work units are (query row (token,
sequence), KV chunk). Prompt chunks (Q_BLOCK tokens or more, no softcap) run flash_attn_tiles: blocks of query rows
against tiles of keys by the own GEMM's micro-kernel, the workers splitting the blocks, over the tiles that some
token's span meets; a block whose tokens share few keys (_tiled: one token each of several sequences) runs on
flash_attn_units instead. With few rows (a generated token) the live span is split too, into one chunk per worker,
chunk c taking its tiles c, c + n_chunks, ...: each unit leaves its partial (max, sum, accumulator) per query head in
the temp block, and one combine pass after the workers joins them (llama.cpp's split-KV decode). The rows of K, V and
the mask must be contiguous (nb[0] = type size, as ggml reads them), their other strides are free (views of a KV
cache)."""
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from ....types import Q8_0
from ..registry import BoundNode, register
from .common import alibi_slopes, kernel, launch, scalar
from .fp16 import load
from .gemm import MR, NR, micro_kernel, pack_rows
from .mathfn import fast_exp

TILE = 32               # keys per tile: scores, then the softmax update, then the value rows
MIN_CHUNK = 128         # the fewest keys a unit of a split KV length reads
UNITS_PER_THREAD = 4    # the KV length is split when the query rows give the workers fewer units each
Q_BLOCK = 8             # flash_attn_tiles: tokens whose query rows a unit takes together
SCAN = 64               # mask elements a live-span search compares at a time
TILED_SHARE = 3         # flash_attn_tiles takes a block whose tokens see each of their keys this many times on average


@intrinsic
def _half(typingctx, bits):
    """IEEE half bits (uint16) -> float32 by LLVM's fpext (vcvtph2ps where the CPU has F16C: loops vectorise)."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


def _element(x):
    """An element of a float row (float32, uint16 half bits, int16 bfloat16 bits) as float32."""


@overload(_element, inline="always")
def _element_impl(x):
    if x == types.uint16:
        return lambda x: _half(x)
    return lambda x: load(x)


@scalar
def _row_float(buf, src, at):
    """buf[:] = the float row of src (F32, F16 or BF16 elements) that starts at element `at`."""
    row = src[at:at + buf.size]         # a slice: indices known >= 0, so the loop vectorises
    for i in range(buf.size):
        buf[i] = _element(row[i])


@intrinsic
def _int8(typingctx, byte):
    """A byte (uint8) read as int8, as float32 (one sitofp: loops of it vectorise)."""
    def codegen(context, builder, sig, args):
        return builder.sitofp(args[0], ir.FloatType())
    return types.float32(types.uint8), codegen


@scalar
def _row_q8_0(buf, src, at):
    """buf[:] = the Q8_0 row of src (bytes) that starts at byte `at`, dequantized."""
    nb = buf.size // 32
    width = buf.size // nb          # 32, but not a constant: LLVM vectorises the loop instead of unrolling it
    for b in range(nb):
        d = _half(np.uint16(src[at + 34 * b]) | np.uint16(src[at + 34 * b + 1]) << np.uint16(8))
        qs = src[at + 34 * b + 2:at + 34 * b + 34]
        out = buf[32 * b:32 * b + 32]
        for i in range(width):
            out[i] = d * _int8(qs[i])


@scalar
def _row(code, buf, src, at):
    """buf[:] = the row of src at `at`: code 0 a float row, 1 a Q8_0 row (direct calls: inlined, so the loops
    vectorise in place; code is a literal, the other branch compiled away)."""
    if code == 0:
        _row_float(buf, src, at)
    else:
        _row_q8_0(buf, src, at)


@scalar
def _dot3(a, b, c, k, n):
    """(a . k, b . k, c . k) over the first n elements: one pass over k."""
    s0 = np.float32(0.0)
    s1 = np.float32(0.0)
    s2 = np.float32(0.0)
    for i in range(n):
        s0 += a[i] * k[i]
        s1 += b[i] * k[i]
        s2 += c[i] * k[i]
    return s0, s1, s2


@scalar
def _seen(row, j, n):
    """How many of row[j:j + n] are > -inf (keys the mask lets through): vectorised for n = SCAN."""
    seg, seen = row[j:j + n], 0
    for i in range(n):
        seen += _element(seg[i]) > np.float32(-np.inf)
    return seen


@scalar
def _live_span(mf, ms, i3, i1, n_head, n_kv):
    """(lo, hi): the keys from the first to the last one whose mask is finite for some head of query row (i3, i1)
    (the mask rows of the heads: one where ms[1] == 1; no mask: all); lo >= hi: none. Searched SCAN elements at a
    time from either end, each further head's row only outside the span found so far."""
    lo, hi = (n_kv, 0) if ms[0] else (0, n_kv)
    for hm in range(min(ms[1], n_head) if ms[0] else 0):
        row, j = mf[i3 % ms[0] * ms[4] + hm * ms[5] + i1 * ms[6]:][:n_kv], 0
        while j + SCAN <= lo and not _seen(row, j, SCAN):
            j += SCAN
        while j < lo and not _seen(row, j, 1):
            j += 1
        lo, j, b = j, n_kv, max(j, hi)
        while j - SCAN >= b and not _seen(row, j - SCAN, SCAN):
            j -= SCAN
        while j > b and not _seen(row, j - 1, 1):
            j -= 1
        hi = j if j > b else hi
    return lo, hi


@kernel
def flash_attn_spans(spans, plan, mf, ms, n_head, ith, nth):
    """spans[i3, i1] = _live_span of every query row (i3, i1), then plan = (the blocks flash_attn_tiles takes, those
    left to flash_attn_units): a serial pass (a vectorised scan of what lies outside the spans), the kernels after it
    launched only where they have work (ith, nth: launched by one worker)."""
    n_seq, n = spans.shape[:2]
    for r in range(n_seq * n):
        spans[r // n, r % n, 0], spans[r // n, r % n, 1] = _live_span(mf, ms, r // n, r % n, n_head, ms[3])
    plan[:] = 0
    for i3 in range(n_seq):
        for t0 in range(0, n, Q_BLOCK):
            plan[0 if _tiled(spans, i3, t0, n) else 1] += 1


@scalar
def _tiled(spans, i3, t0, n):
    """Whether block t0 // Q_BLOCK of sequence i3 runs on flash_attn_tiles: its tokens (t0 .. t0 + Q_BLOCK - 1, < n)
    see each key of the union of their spans TILED_SHARE times or more on average (a prompt chunk, not the tokens of
    several sequences); the union by the sweep in order of lo (ties by token): each span adds what lies past the
    furthest end of the spans before it."""
    total, union = 0, 0
    for t in range(t0, min(t0 + Q_BLOCK, n)):
        lo, hi = spans[i3, t, 0], spans[i3, t, 1]
        top = lo
        for u in range(t0, min(t0 + Q_BLOCK, n)):
            if spans[i3, u, 0] < spans[i3, u, 1] and (spans[i3, u, 0] < lo or spans[i3, u, 0] == lo and u < t):
                top = max(top, spans[i3, u, 1])
        total, union = total + max(hi - lo, 0), union + max(hi - top, 0)
    return total >= TILED_SHARE * union


@scalar
def _capped(s, softcap):
    """A score with the logit softcap applied (softcap * tanh(s / softcap)); softcap 0: none."""
    return s if softcap == 0 else softcap * np.float32(math.tanh(s / softcap))


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz", "arcp"})
def flash_attn_units(kcode, vcode, dk, dv, d, part, q, kf, ks, vf, vs, mf, ms, spans, tiled, slopes, scale, softcap,
                     n_chunks, ith, nth):
    """Units u = ith, ith + nth, ... of (query row r = (i3, i1), chunk c): every query head h of token i1 attends
    over the keys of tiles c, c + n_chunks, ... of its live span (_live_span; spans[i3, i1] where `tiled`), a key's
    rows of all KV heads read together (adjacent in a cache); where `tiled` (flash_attn_spans ran), the rows of the
    blocks that flash_attn_tiles takes are skipped.
    With one chunk d[i3, i1, h] is the result (d (S, N, H, Dv), q (S, H, N, D)); else part[r, c, h] = (max, sum,
    accumulator...) (float32 (rows, n_chunks, H, 2 + Dv)). K, V and the mask as flat runs of their memory from their
    first element (C-contiguous: row loads vectorise), ks / vs / ms = (dims 3, 2, 1 and 0, strides of dims 3, 2, 1 in
    the run's elements); no mask: ms[0] == 0; kcode / vcode: K's and V's row type (_row's code); dk / dv: q's and d's
    ne0 (literals: the row loops have constant trip counts, unrolled and vectorised without remainders)."""
    n_seq, n_head, n = q.shape[:3]
    kv_heads, n_kv = ks[1], ks[2]
    group = n_head // kv_heads
    qrows = np.empty((n_head, dk), np.float32)
    kbuf = np.empty(dk, np.float32)
    vbuf = np.empty(dv, np.float32)
    sc = np.empty((n_head, TILE), np.float32)
    live = np.empty(TILE, np.bool_)
    acc = np.zeros((n_head, dv), np.float32)
    mx = np.empty(n_head, np.float32)
    sm = np.empty(n_head, np.float32)
    m0 = np.zeros(n_head, np.int64)
    ninf = np.float32(-np.inf)
    masked = ms[0] > 0
    for u in range(ith, n_seq * n * n_chunks, nth):
        r, c = u // n_chunks, u % n_chunks
        i3, i1 = r // n, r % n
        if tiled and _tiled(spans, i3, i1 // Q_BLOCK * Q_BLOCK, n):
            continue
        k0 = i3 // (n_seq // ks[0]) * ks[4]
        v0 = i3 // (n_seq // vs[0]) * vs[4]
        for h in range(n_head):
            if masked:
                m0[h] = i3 % ms[0] * ms[4] + h % ms[1] * ms[5] + i1 * ms[6]
            for i in range(dk):
                qrows[h, i] = np.float32(q[i3, h, i1, i]) * scale
        mx[:] = ninf
        sm[:] = 0
        acc[:] = 0
        first, end = (spans[i3, i1, 0], spans[i3, i1, 1]) if tiled else _live_span(mf, ms, i3, i1, n_head, n_kv)
        # the chunks split the live keys, not all n_kv
        for t0 in range(first + c * TILE, end, n_chunks * TILE):
            nt = min(TILE, end - t0)
            live[:] = not masked
            if masked:                          # the mask's bias; keys masked for every head are not read
                for h in range(n_head):
                    slope = slopes[h]
                    row = mf[m0[h] + t0:m0[h] + t0 + nt]
                    for jj in range(nt):
                        sc[h, jj] = slope * _element(row[jj])
                        live[jj] = live[jj] or sc[h, jj] > ninf
            else:
                sc[:] = 0
            for jj in range(nt):                # scores
                if not live[jj]:
                    continue
                for g in range(kv_heads):
                    _row(kcode, kbuf, kf, k0 + g * ks[5] + (t0 + jj) * ks[6])
                    h, hi = g * group, (g + 1) * group
                    while h + 3 <= hi:          # three heads a pass over the key row: three sums in registers
                        s0, s1, s2 = _dot3(qrows[h], qrows[h + 1], qrows[h + 2], kbuf, dk)
                        sc[h, jj] += _capped(s0, softcap)
                        sc[h + 1, jj] += _capped(s1, softcap)
                        sc[h + 2, jj] += _capped(s2, softcap)
                        h += 3
                    for hr in range(h, hi):     # the heads left over
                        s = np.float32(0.0)
                        for i in range(dk):
                            s += qrows[hr, i] * kbuf[i]
                        sc[hr, jj] += _capped(s, softcap)
            any_live = False
            for h in range(n_head):             # online softmax: scores -> weights, max and sum updated
                tm = ninf
                for jj in range(nt):
                    tm = max(tm, sc[h, jj])
                if tm == ninf:
                    for jj in range(nt):
                        sc[h, jj] = 0
                    continue
                any_live = True
                if tm > mx[h]:
                    f = fast_exp(mx[h] - tm) if mx[h] > ninf else np.float32(0.0)
                    sm[h] *= f
                    for i in range(dv):
                        acc[h, i] *= f
                    mx[h] = tm
                total = np.float32(0.0)
                for jj in range(nt):
                    w = fast_exp(sc[h, jj] - mx[h])
                    sc[h, jj] = w
                    total += w
                sm[h] += total
            if not any_live:
                continue
            for jj in range(nt):                # weighted value rows
                if not live[jj]:
                    continue
                for g in range(kv_heads):
                    _row(vcode, vbuf, vf, v0 + g * vs[5] + (t0 + jj) * vs[6])
                    for h in range(g * group, (g + 1) * group):
                        w = sc[h, jj]
                        for i in range(dv):
                            acc[h, i] += w * vbuf[i]
        for h in range(n_head):
            if n_chunks == 1:
                inv = np.float32(0.0) if sm[h] == 0 else np.float32(1.0) / sm[h]
                for i in range(dv):
                    d[i3, i1, h, i] = acc[h, i] * inv
            else:
                part[r, c, h, 0], part[r, c, h, 1] = mx[h], sm[h]
                for i in range(dv):
                    part[r, c, h, 2 + i] = acc[h, i]


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz", "arcp"})
def flash_attn_tiles(kcode, vcode, d, q, kf, ks, vf, vs, mf, ms, spans, slopes, scale, ith, nth):
    """flash_attn_units for prompt chunks (one KV chunk, no softcap): units u = ith, ith + nth, ... of (sequence i3,
    block of Q_BLOCK tokens, KV head g), whose query rows r (token t0 + r // group, head g * group + r % group) attend
    together: each tile's K and V rows are converted to float32 once for all of them, and the scores (added to the
    mask's bias) and the weighted value rows are the own GEMM's micro-kernel products (gemm.py: q, K and the weights
    in its panels; V's rows read in place, padded to whole panels of columns)."""
    n_seq, n_head, n, dk = q.shape
    kv_heads, n_kv, dv = ks[1], ks[2], d.shape[3]
    dvp, group = (dv + MR - 1) // MR * MR, n_head // kv_heads
    rows = (Q_BLOCK * group + NR - 1) // NR * NR
    qp, pt = np.zeros(rows * dk, np.float32), np.zeros(rows * TILE, np.float32)   # panels of NR rows
    kt, kp = np.empty((TILE, dk), np.float32), np.empty(TILE * dk, np.float32)   # K rows, panels of MR keys
    vt = np.zeros((TILE, dvp), np.float32)
    sc, acc = np.zeros((rows, TILE), np.float32), np.empty((rows, dvp), np.float32)
    mx, sm, live = np.empty(rows, np.float32), np.empty(rows, np.float32), np.empty(TILE, np.bool_)
    panel = np.empty(rows // NR, np.bool_)
    ninf = np.float32(-np.inf)
    blocks = (n + Q_BLOCK - 1) // Q_BLOCK
    for u in range(ith, n_seq * blocks * kv_heads, nth):
        i3, t0, g = u // (kv_heads * blocks), u // kv_heads % blocks * Q_BLOCK, u % kv_heads
        nq = min(Q_BLOCK, n - t0)
        nr, span = nq * group, spans[i3, t0:t0 + nq]
        if not _tiled(spans, i3, t0, n):
            continue
        k0 = i3 // (n_seq // ks[0]) * ks[4] + g * ks[5]
        v0 = i3 // (n_seq // vs[0]) * vs[4] + g * vs[5]
        for r in range(nr):
            for i in range(dk):
                qp[r // NR * NR * dk + i * NR + r % NR] = np.float32(q[i3, g * group + r % group, t0 + r // group, i]) * scale
        mx[:] = ninf
        sm[:] = 0
        acc[:] = 0
        j0, end = n_kv, 0                       # the tiles from the first live key of the block's tokens to the last
        for t in range(nq):
            if span[t, 0] < span[t, 1]:
                j0, end = min(j0, span[t, 0]), max(end, span[t, 1])
        for j in range(j0, end, TILE):
            nt, meets = min(TILE, end - j), 0
            for t in range(nq):                 # the tokens whose live span meets the tile [j, j + nt)
                meets += span[t, 0] < min(span[t, 1], j + nt) and j < span[t, 1]
            if meets == 0:                      # a gap between the tokens' spans
                continue
            panel[:] = meets == nq
            for t in range(nq if meets < nq else 0):    # the panels of their rows
                if span[t, 0] < min(span[t, 1], j + nt) and j < span[t, 1]:
                    for r in range(t * group, (t + 1) * group):
                        panel[r // NR] = True
            live[:] = ms[0] == 0
            for r in range(nr if ms[0] else 0):     # the mask's bias; keys masked for every row are not read
                h = g * group + r % group
                at = i3 % ms[0] * ms[4] + h % ms[1] * ms[5] + (t0 + r // group) * ms[6] + j
                row, s = mf[at:at + nt], sc[r]
                for jj in range(nt):
                    s[jj] = slopes[h] * _element(row[jj])
                    live[jj] |= s[jj] > ninf
            if not live[:nt].any():
                continue
            for jj in range(TILE):              # the tile's K and V rows as float32 (dead keys: zeros)
                kt[jj], vt[jj] = 0, 0
                if jj < nt and live[jj]:
                    _row(kcode, kt[jj], kf, k0 + (j + jj) * ks[6])
                    _row(vcode, vt[jj, :dv], vf, v0 + (j + jj) * vs[6])
            for jp in range(0, TILE, MR):
                pack_rows(kp, jp * dk, MR, kt, jp, MR, 0, dk)
                for rp in range(0, rows, NR):   # scores: sc[r, j] (+)= q_r . k_j (a row outside its span: the
                    # mask's -inf throughout; panels of such rows are skipped, their weights 0)
                    if panel[rp // NR]:
                        micro_kernel(kp.ctypes.data + jp * dk * 4, MR, qp.ctypes.data + rp * dk * 4,
                                     sc.ctypes.data + (rp * TILE + jp) * 4, TILE, dk, ms[0])
            for r in range(nr):                 # online softmax: scores -> weights, max and sum updated
                s, tm, total = sc[r], ninf, np.float32(0.0)
                for jj in range(nt):
                    tm = max(tm, s[jj])
                if tm > mx[r]:
                    f = fast_exp(mx[r] - tm)
                    sm[r] *= f
                    acc[r] *= f
                    mx[r] = tm
                top = mx[r] if mx[r] > ninf else np.float32(np.inf)
                for jj in range(nt):
                    s[jj] = fast_exp(s[jj] - top)
                    total += s[jj]
                sm[r] += total
                for jj in range(nt):
                    pt[r // NR * NR * TILE + jj * NR + r % NR] = s[jj]
            for rp in range(0, rows, NR):       # acc[r] += sum_j w_rj v_j
                for ip in range(0, dvp if panel[rp // NR] else 0, MR):
                    micro_kernel(vt.ctypes.data + ip * 4, dvp, pt.ctypes.data + rp * TILE * 4,
                                 acc.ctypes.data + (rp * dvp + ip) * 4, dvp, nt, 1)
        for r in range(nr):
            inv = np.float32(0.0) if sm[r] == 0 else np.float32(1.0) / sm[r]
            for i in range(dv):
                d[i3, t0 + r // group, g * group + r % group, i] = acc[r, i] * inv


@kernel
def flash_attn_combine(d, part, ith, nth):
    """d[i3, i1, h] = the chunks' partial results part[r, :, h] of query row r = (i3, i1) joined: each chunk's sum
    and accumulator scaled by exp(its max - the overall max); no key seen: zeros."""
    n_seq, n, n_head, dv = d.shape
    rows, n_chunks = part.shape[:2]
    for r in range(ith, rows, nth):
        i3, i1 = r // n, r % n
        for h in range(n_head):
            out = d[i3, i1, h]
            top = np.float32(-np.inf)
            for c in range(n_chunks):
                top = max(top, part[r, c, h, 0])
            out[:] = 0
            if top == -np.inf:
                continue
            total = np.float32(0.0)
            for c in range(n_chunks):
                p = part[r, c, h]
                f = fast_exp(p[0] - top) if p[0] > -np.inf else np.float32(0.0)
                total += f * p[1]
                for i in range(dv):
                    out[i] += f * p[2 + i]
            inv = np.float32(1.0) / total
            for i in range(dv):
                out[i] *= inv


def _plan(node, n_threads: int) -> tuple:
    """(workers, KV chunks) of a flash_attn_ext node: the KV length is split into one chunk per worker when the query
    rows (tokens) would give the workers fewer than UNITS_PER_THREAD units each, and it has MIN_CHUNK keys per chunk."""
    q, k, v = node.src[:3]
    rows = q.ne[1] * q.ne[3]
    work = q.ne[1] * q.ne[2] * q.ne[3] * k.ne[1] * (k.ne[0] + v.ne[0])
    nth = max(1, min(n_threads, work // (1 << 15)))
    split = 1 < nth and rows < UNITS_PER_THREAD * nth and k.ne[1] >= MIN_CHUNK * nth
    return nth, nth if split else 1


def _refusal(node) -> str | None:
    k, v = node.src[1:3]
    if any(t.type.quantized and t.type != Q8_0 for t in (k, v)):
        return f"flash_attn_ext on the CPU reads K and V as f32, f16, bf16 or q8_0, not {k.type.name}, {v.type.name}"
    mask = node.src[3] if len(node.src) > 3 else None
    if mask is not None and mask.nb[0] != mask.type.size:
        return f"flash_attn_ext on the CPU reads the mask's rows contiguous (nb[0] = type size), not nb {mask.nb}"
    return None


def _temp_size(node, impl, backend) -> int:
    nth, n_chunks = _plan(node, backend.n_threads)
    q, v = node.src[0], node.src[2]
    return 0 if n_chunks == 1 else q.ne[1] * q.ne[3] * n_chunks * q.ne[2] * (2 + v.ne[0]) * 4


def _flat(a: np.ndarray) -> tuple:
    """(a C-contiguous 1-d view of a's memory from its first element to its last, int64 (ne3, ne2, ne1, ne0, element
    strides of dims 3, 2, 1)) of K, V or the mask (a quantized one's rows as bytes, ne0 counting them)."""
    es = a.itemsize
    extent = 1 + sum((n - 1) * st // es for n, st in zip(a.shape, a.strides))
    run = np.lib.stride_tricks.as_strided(a, (extent,), (es,))
    return run, np.array(a.shape + tuple(st // es for st in a.strides[:3]), np.int64)


@register("flash_attn_ext", refusal=_refusal, temp_size=_temp_size)
def bind_flash_attn_ext(b: BoundNode):
    """Prompt chunks (n_chunks 1, Q_BLOCK tokens or more, no softcap): flash_attn_spans, then flash_attn_tiles on the
    blocks _tiled takes and flash_attn_units on the others' rows; else flash_attn_units [and the combine]."""
    p = b.node.op_params
    q = b.srcs[0]
    (kf, ks), (vf, vs) = _flat(b.srcs[1]), _flat(b.srcs[2])
    mf, ms = _flat(b.srcs[3]) if len(b.srcs) > 3 else (np.zeros(1, np.float32), np.zeros(7, np.int64))
    nth, n_chunks = _plan(b.node, b.n_threads)
    rows, n_head, dv = q.shape[0] * q.shape[2], q.shape[1], b.dst.shape[3]
    part = (b.temp.view(np.float32)[:rows * n_chunks * n_head * (2 + dv)].reshape(rows, n_chunks, n_head, 2 + dv)
            if n_chunks > 1 else np.zeros((1, 1, 1, 1), np.float32))
    tiled = n_chunks == 1 and q.shape[2] >= Q_BLOCK and p["logit_softcap"] == 0
    spans, plan = np.zeros((q.shape[0], q.shape[2], 2), np.int64), np.zeros(2, np.int64)
    codes = (int(b.node.src[1].type.quantized), int(b.node.src[2].type.quantized))
    slopes = alibi_slopes(n_head, p["max_bias"])
    units = launch(flash_attn_units, codes + (q.shape[3], dv, b.dst, part, q, kf, ks, vf, vs, mf, ms, spans, tiled,
                                              slopes, np.float32(p["scale"]), np.float32(p["logit_softcap"]), n_chunks),
                   nth, constants=(0, 1, 2, 3))
    if tiled:
        find = launch(flash_attn_spans, (spans, plan, mf, ms, n_head), 1)
        tiles = launch(flash_attn_tiles, codes + (b.dst, q, kf, ks, vf, vs, mf, ms, spans, slopes,
                                                  np.float32(p["scale"])), nth, constants=(0, 1))

        def run():
            find()
            if plan[0]:
                tiles()
            if plan[1]:
                units()
        return run
    if n_chunks == 1:
        return units
    combine = launch(flash_attn_combine, (b.dst, part), 1)

    def run_split():
        units()
        combine()
    return run_split
