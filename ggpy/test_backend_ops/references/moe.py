"""mul_mat_id's reference from ggml's definition: result[t, e] = as[ids[t, e]] @ b[t, e % B1]."""
from __future__ import annotations

import numpy as np

from .common import reference


@reference("mul_mat_id")
def _mul_mat_id(node, s):
    as_, b, ids = s[0][0], s[1][0], s[2][0, 0].astype(np.int64)     # as (n_expert, M, K), b (T, B1, K), ids (T, U)
    tokens, used = ids.shape
    rows = b[np.arange(tokens)[:, None], np.arange(used)[None, :] % b.shape[1]]     # (T, U, K)
    return np.einsum("tumk,tuk->tum", as_[ids], rows)[None]
