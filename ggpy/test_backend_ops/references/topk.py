"""References of argmax and top_k from their definitions: numpy's argmax (the first largest, the first nan) and a
stable sort of the rows by descending value (equal values by lower index, nan first); argsort also ascending (nan
last)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .common import reference


@reference("argmax")
def _argmax(node, s):
    return np.argmax(s[0], axis=-1).reshape(1, 1, 1, -1)


@reference("top_k")
def _top_k(node, s):
    x = s[0]
    nan = np.isnan(x)
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    order = np.lexsort((idx, -np.where(nan, 0.0, x), ~nan), axis=-1)     # the last key sorts first
    return order[..., :node.op_params["k"]]


@reference("argsort")
def _argsort(node, s):
    x = s[0]
    if node.op_params["desc"]:
        return _top_k(SimpleNamespace(op_params={"k": x.shape[-1]}), s)
    nan = np.isnan(x)
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    return np.lexsort((idx, np.where(nan, 0.0, x), nan), axis=-1)     # numbers first, ascending, then nan
