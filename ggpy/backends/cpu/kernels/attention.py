"""flash_attn_ext: one query row at a time, the key/value rows of its KV head streamed once with an online softmax
(running max and sum, the accumulator rescaled when the max grows), as ggml's CPU kernel; float32 throughout (q is
not rounded to K's type). Workers split the query rows (token, head, sequence) in blocks. K's and V's rows must be
contiguous (nb[0] = type size, as ggml asks), their other strides are free (views of a KV cache)."""
import math

import numpy as np
from numba import njit

from ..registry import BoundNode, register
from .common import alibi_slopes, block, launch, row_index
from .fp16 import load
from .mathfn import fast_exp


@njit(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def flash_attn_rows(d, q, kf, ks, vf, vs, m, slopes, scale, softcap, ith, nth):
    """d[i3, i1, h] = attention of q[i3, h, i1] for the query heads h of each KV head (d (S, N, H, Dv), q (S, H, N,
    D), m None or (M3, M2, >= N, n_kv)); K and V as flat runs from their first element, ks / vs = (Sk, Hk, n_kv, D
    or Dv, element strides of dims 3, 2, 1) (rows contiguous: the dot products and sums vectorise)."""
    n_seq, n_head, n, dk = q.shape
    n_kv, dv, kv_heads = ks[2], vs[3], ks[1]
    group = n_head // kv_heads
    sc = np.empty((group, n_kv), np.float32)
    qrows = np.empty((group, dk), np.float32)
    acc = np.empty((group, dv), np.float32)
    r0, r1 = block(n_seq * kv_heads * n, ith, nth)
    for r in range(r0, r1):
        i3, g, i1 = row_index(r, kv_heads, n)
        k0 = i3 // (n_seq // ks[0]) * ks[4] + g * ks[5]
        v0 = i3 // (n_seq // vs[0]) * vs[4] + g * group // (n_head // vs[1]) * vs[5]
        for h in range(group):
            for i in range(dk):
                qrows[h, i] = load(q[i3, g * group + h, i1, i]) * scale
        for j in range(n_kv):           # scores: each key row read once for the group's query heads
            krow = kf[k0 + j * ks[6]:]         # a slice: indices known >= 0, so the loops vectorise
            for h in range(group):
                s = np.float32(0.0)
                for i in range(dk):
                    s += qrows[h, i] * load(krow[i])
                if softcap != 0:
                    s = softcap * np.float32(math.tanh(s / softcap))
                if m is not None:
                    s += slopes[g * group + h] * load(m[i3 % m.shape[0], (g * group + h) % m.shape[1], i1, j])
                sc[h, j] = s
        acc[:] = 0
        for h in range(group):          # softmax weights; a row of -inf scores gets all zeros
            mx = np.float32(-np.inf)
            for j in range(n_kv):
                mx = max(mx, sc[h, j])
            total = np.float32(0.0)
            for j in range(n_kv):
                w = fast_exp(sc[h, j] - mx) if mx > -np.inf else np.float32(0.0)
                sc[h, j] = w
                total += w
            inv = np.float32(0.0) if total == 0 else np.float32(1.0) / total
            for j in range(n_kv):
                sc[h, j] *= inv
        for j in range(n_kv):
            vrow = vf[v0 + j * vs[6]:]
            for h in range(group):
                w = sc[h, j]
                if w != 0:
                    for i in range(dv):
                        acc[h, i] += w * load(vrow[i])
        for h in range(group):
            out = d[i3, i1, g * group + h]
            for i in range(dv):
                out[i] = acc[h, i]


def _flat(a):
    """(a 1-d view of a's memory from its first element to its last, int64 [shape..., element strides of dims 3, 2,
    1])."""
    es = a.itemsize
    extent = 1 + sum((n - 1) * st // es for n, st in zip(a.shape, a.strides))
    return (np.lib.stride_tricks.as_strided(a, (extent,), (es,)),
            np.array(a.shape + tuple(st // es for st in a.strides[:3]), np.int64))


@register("flash_attn_ext")
def bind_flash_attn_ext(b: BoundNode):
    p = b.node.op_params
    q, k, v = b.srcs[:3]
    slopes = alibi_slopes(q.shape[1], p["max_bias"])
    args = (b.dst, q, *_flat(k), *_flat(v), b.srcs[3] if len(b.srcs) > 3 else None, slopes, np.float32(p["scale"]),
            np.float32(p["logit_softcap"]))
    return launch(flash_attn_rows, args, b.threads_for(q.size // q.shape[3] * k.shape[2] * (q.shape[3] + v.shape[3])))
