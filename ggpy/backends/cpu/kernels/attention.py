"""flash_attn_ext: the key/value rows of a KV head streamed once per query row (token, KV head, sequence) for the
query heads it serves, in tiles of TILE keys with an online softmax (running max and sum, the accumulator rescaled
when the max grows), as ggml's CPU kernel; float32 throughout (q is not rounded to K's type). K and V are F32, F16,
BF16 or Q8_0 (ggml's blocks of 32: f16 scale, 32 int8), each row converted to float32 once per tile.

Work units are (query row, KV chunk). With many query rows (prompt chunks) a chunk is the whole KV length and the
workers split the rows. With few (a generated token: one row per KV head) the KV length is split too, into one chunk
per worker, chunk c taking the tiles c, c + n_chunks, ... (so the masked tail of the cache falls on every chunk
alike): each unit leaves its partial (max, sum, accumulator) per query head in the temp block, and one combine pass
after the workers joins them (llama.cpp's split-KV decode). Keys whose mask is -inf for every query head are skipped unread (the
cache rows past the context, the future of a causal mask). K's and V's rows must be contiguous (nb[0] = type size, as
ggml asks), their other strides are free (views of a KV cache)."""
import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from ....types import Q8_0
from ..registry import BoundNode, register
from .common import alibi_slopes, kernel, launch, row_index, scalar
from .fp16 import load
from .mathfn import fast_exp

TILE = 32               # keys per tile: scores, then the softmax update, then the value rows
MIN_CHUNK = 128         # the fewest keys a unit of a split KV length reads
UNITS_PER_THREAD = 4    # the KV length is split when the query rows give the workers fewer units each


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


@scalar
def _row_q8_0(buf, src, at):
    """buf[:] = the Q8_0 row of src (bytes) that starts at byte `at`, dequantized."""
    row = src[at:at + buf.size // 32 * 34]
    for b in range(buf.size // 32):
        d = _half(np.uint16(row[34 * b]) | np.uint16(row[34 * b + 1]) << np.uint16(8))
        for i in range(32):
            buf[32 * b + i] = d * np.float32(np.int8(row[34 * b + 2 + i]))


@scalar
def _row(code, buf, src, at):
    """buf[:] = the row of src at `at`: code 0 a float row, 1 a Q8_0 row (direct calls: inlined, so the loops
    vectorise in place; code is a literal, the other branch compiled away)."""
    if code == 0:
        _row_float(buf, src, at)
    else:
        _row_q8_0(buf, src, at)


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract", "nsz", "arcp"})
def flash_attn_units(kcode, vcode, d, part, q, kf, ks, vf, vs, m, slopes, scale, softcap, n_chunks, ith, nth):
    """Units u = ith, ith + nth, ... of (query row r = (i3, g, i1), chunk c): the query heads h of KV head g attend
    over the keys of tiles c, c + n_chunks, ... With one chunk d[i3, i1, h] is the result (d (S, N, H, Dv), q (S, H, N,
    D)); else part[r, c, h] = (max, sum, accumulator...) (float32 (rows, n_chunks, group, 2 + Dv)). m None or (M3,
    M2, >= N, n_kv). K and V as flat runs of their memory from their first element (C-contiguous: the row loads
    vectorise), ks / vs = (Sk, Hk, n_kv, strides of dims 3, 2, 1 in the run's elements); kcode / vcode: their row
    type (_row's code)."""
    n_seq, n_head, n, dk = q.shape
    kv_heads, n_kv = ks[1], ks[2]
    dv = d.shape[3]
    group = n_head // kv_heads
    qrows = np.empty((group, dk), np.float32)
    kbuf = np.empty(dk, np.float32)
    vbuf = np.empty(dv, np.float32)
    sc = np.empty((group, TILE), np.float32)
    live = np.empty(TILE, np.bool_)
    acc = np.zeros((group, dv), np.float32)
    mx = np.empty(group, np.float32)
    sm = np.empty(group, np.float32)
    mh = np.zeros(group, np.int64)
    ninf = np.float32(-np.inf)
    for u in range(ith, n_seq * kv_heads * n * n_chunks, nth):
        r, c = u // n_chunks, u % n_chunks
        i3, g, i1 = row_index(r, kv_heads, n)
        k0 = i3 // (n_seq // ks[0]) * ks[3] + g * ks[4]
        v0 = i3 // (n_seq // vs[0]) * vs[3] + g * vs[4]
        mi3 = 0 if m is None else i3 % m.shape[0]
        for h in range(group):
            if m is not None:
                mh[h] = (g * group + h) % m.shape[1]
            for i in range(dk):
                qrows[h, i] = np.float32(q[i3, g * group + h, i1, i]) * scale
        mx[:] = ninf
        sm[:] = 0
        acc[:] = 0
        for t0 in range(c * TILE, n_kv, n_chunks * TILE):
            nt = min(TILE, n_kv - t0)
            live[:] = m is None
            if m is not None:                   # the mask's bias; keys masked for every head are not read
                for h in range(group):
                    slope = slopes[g * group + h]
                    for jj in range(nt):
                        sc[h, jj] = slope * load(m[mi3, mh[h], i1, t0 + jj])
                        live[jj] = live[jj] or sc[h, jj] > ninf
            else:
                sc[:] = 0
            for jj in range(nt):                # scores
                if not live[jj]:
                    continue
                _row(kcode, kbuf, kf, k0 + (t0 + jj) * ks[5])
                for h in range(group):
                    s = np.float32(0.0)
                    for i in range(dk):
                        s += qrows[h, i] * kbuf[i]
                    if softcap != 0:
                        s = softcap * np.float32(math.tanh(s / softcap))
                    sc[h, jj] += s
            any_live = False
            for h in range(group):              # online softmax: scores -> weights, max and sum updated
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
                _row(vcode, vbuf, vf, v0 + (t0 + jj) * vs[5])
                for h in range(group):
                    w = sc[h, jj]
                    for i in range(dv):
                        acc[h, i] += w * vbuf[i]
        for h in range(group):
            if n_chunks == 1:
                inv = np.float32(0.0) if sm[h] == 0 else np.float32(1.0) / sm[h]
                for i in range(dv):
                    d[i3, i1, g * group + h, i] = acc[h, i] * inv
            else:
                part[r, c, h, 0], part[r, c, h, 1] = mx[h], sm[h]
                for i in range(dv):
                    part[r, c, h, 2 + i] = acc[h, i]


@kernel
def flash_attn_combine(d, part, kv_heads, ith, nth):
    """d[i3, i1, g * group + h] = the chunks' partial results part[r, :, h] of query row r = (i3, g, i1) joined:
    each chunk's sum and accumulator scaled by exp(its max - the overall max); no key seen: zeros."""
    n_seq, n, n_head, dv = d.shape
    rows, n_chunks, group = part.shape[:3]
    for r in range(ith, rows, nth):
        i3, g, i1 = row_index(r, kv_heads, n)
        for h in range(group):
            out = d[i3, i1, g * group + h]
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
    rows would give the workers fewer than UNITS_PER_THREAD units each, and it has MIN_CHUNK keys per chunk."""
    q, k, v = node.src[:3]
    rows = q.ne[1] * k.ne[2] * q.ne[3]
    work = q.ne[1] * q.ne[2] * q.ne[3] * k.ne[1] * (k.ne[0] + v.ne[0])
    nth = max(1, min(n_threads, work // (1 << 15)))
    split = 1 < nth and rows < UNITS_PER_THREAD * nth and k.ne[1] >= MIN_CHUNK * nth
    return nth, nth if split else 1


def _refusal(node) -> str | None:
    k, v = node.src[1:3]
    if any(t.type.quantized and t.type != Q8_0 for t in (k, v)):
        return f"flash_attn_ext on the CPU reads K and V as f32, f16, bf16 or q8_0, not {k.type.name}, {v.type.name}"
    return None


def _temp_size(node, impl, backend) -> int:
    nth, n_chunks = _plan(node, backend.n_threads)
    q, k, v = node.src[:3]
    return 0 if n_chunks == 1 else q.ne[1] * k.ne[2] * q.ne[3] * n_chunks * q.ne[2] // k.ne[2] * (2 + v.ne[0]) * 4


def _flat(a: np.ndarray) -> tuple:
    """(a C-contiguous 1-d view of a's memory from its first element to its last, int64 (ne3, ne2, ne1, element
    strides of dims 3, 2, 1)) of a K or V array (a quantized one's rows as bytes)."""
    es = a.itemsize
    extent = 1 + sum((n - 1) * st // es for n, st in zip(a.shape, a.strides))
    run = np.lib.stride_tricks.as_strided(a, (extent,), (es,))
    return run, np.array(a.shape[:3] + tuple(st // es for st in a.strides[:3]), np.int64)


@register("flash_attn_ext", refusal=_refusal, temp_size=_temp_size)
def bind_flash_attn_ext(b: BoundNode):
    p = b.node.op_params
    q, k, v = b.srcs[:3]
    (kf, ks), (vf, vs) = _flat(k), _flat(v)
    nth, n_chunks = _plan(b.node, b.n_threads)
    rows, group, dv = q.shape[0] * k.shape[1] * q.shape[2], q.shape[1] // k.shape[1], b.dst.shape[3]
    part = (b.temp.view(np.float32)[:rows * n_chunks * group * (2 + dv)].reshape(rows, n_chunks, group, 2 + dv)
            if n_chunks > 1 else np.zeros((1, 1, 1, 1), np.float32))
    args = (int(b.node.src[1].type.quantized), int(b.node.src[2].type.quantized), b.dst, part, q, kf, ks, vf, vs,
            b.srcs[3] if len(b.srcs) > 3 else None, alibi_slopes(q.shape[1], p["max_bias"]), np.float32(p["scale"]),
            np.float32(p["logit_softcap"]), n_chunks)
    units = launch(flash_attn_units, args, nth, constants=(0, 1))
    if n_chunks == 1:
        return units
    combine = launch(flash_attn_combine, (b.dst, part, k.shape[1]), 1)

    def run():
        units()
        combine()
    return run
