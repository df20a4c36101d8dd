"""flash_attn_ext reference: per query head, the scores against the key rows of its KV head, a softmax over the
masked scores (all -inf: zeros), the weighted sum of the value rows; float64."""
from __future__ import annotations

import numpy as np

from .common import reference
from .softmax import alibi_slopes


@reference("flash_attn_ext")
def _flash_attn_ext(node, s):
    q, k, v = s[:3]                      # (S, H, N, D), (Sk, Hk, n_kv, D), (Sv, Hv, n_kv, Dv)
    p = node.op_params
    n_seq, n_head, n = q.shape[:3]
    slopes = alibi_slopes(n_head, p["max_bias"])
    out = np.zeros((n_seq, n, n_head, v.shape[3]))
    for i3 in range(n_seq):
        for h in range(n_head):
            kh = k[i3 // (n_seq // k.shape[0]), h // (n_head // k.shape[1])]
            vh = v[i3 // (n_seq // v.shape[0]), h // (n_head // v.shape[1])]
            x = q[i3, h] @ kh.T * p["scale"]
            if p["logit_softcap"]:
                x = p["logit_softcap"] * np.tanh(x / p["logit_softcap"])
            if len(s) > 3:
                m = s[3]
                x = x + slopes[h] * m[i3 % m.shape[0], h % m.shape[1], :n]
            w = np.exp(x - np.max(np.where(np.isinf(x), -1e300, x), axis=-1, keepdims=True))
            sums = w.sum(axis=-1, keepdims=True)
            out[i3, :, h] = np.divide(w, sums, out=np.zeros_like(w), where=sums > 0) @ vh
    return out
