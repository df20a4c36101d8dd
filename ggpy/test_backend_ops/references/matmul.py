"""mul_mat's reference: a broadcast over b's dims 2 and 3, as ggml."""
from __future__ import annotations

import numpy as np

from .common import reference


@reference("mul_mat")
def _mul_mat(node, s):
    a, b = s[0], s[1]                          # a (A3, A2, M, K), b (B3, B2, N, K)
    r3, r2 = b.shape[0] // a.shape[0], b.shape[1] // a.shape[1]
    a = np.repeat(np.repeat(a, r3, axis=0), r2, axis=1)
    return b @ np.swapaxes(a, -1, -2)
