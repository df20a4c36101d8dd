"""The CPU flash_attn_ext's live spans (kernels/attention.py): each query row's first and last key that its mask lets
through for some head (F32 and F16 masks, one mask for all heads or one a head, rows that see nothing), and the plan
that sends a server batch (one token each of several sequences, each in its own range of the cache) to
flash_attn_units and a prompt chunk to flash_attn_tiles. Results against a reference: test_backend_ops' SPANS cases."""
import numpy as np
import pytest

from ggpy.backends.cpu.kernels import attention
from ggpy.backends.cpu.kernels.common import launch


def _spans(mask: np.ndarray, n_head: int):
    """(spans (1, N, 2), plan) of a mask (heads, N, n_kv) by flash_attn_spans."""
    mf, ms = attention._flat(mask.reshape((1,) + mask.shape))
    spans, plan = np.zeros((1, mask.shape[1], 2), np.int64), np.zeros(2, np.int64)
    launch(attention.flash_attn_spans, (spans, plan, mf, ms, n_head), 1)()
    return spans[0], plan


def _expected(mask: np.ndarray) -> list:
    live = np.isfinite(mask).any(axis=0)
    return [(int(np.argmax(r)), int(len(r) - np.argmax(r[::-1]))) if r.any() else None for r in live]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_spans_of_a_server_batch_and_of_a_prompt(dtype):
    n_kv, per = 3000, 187
    batch = np.full((1, 16, n_kv), -np.inf)
    for i in range(16):
        if i != 5:                                          # a padding token: sees nothing
            batch[0, i, i * per + 3:i * per + 3 + 20 + 9 * i] = 0.0
    prompt = np.where(np.arange(n_kv)[None, None] <= n_kv - 16 + np.arange(16)[None, :, None], 0.0, -np.inf)
    for mask, plan_expected in ((batch, [0, 2]), (prompt, [2, 0])):
        m = mask.astype(dtype)
        spans, plan = _spans(m.view(np.uint16) if dtype == np.float16 else m, 9)
        for (lo, hi), want in zip(spans, _expected(mask)):
            assert (lo >= hi) if want is None else (lo, hi) == want
        assert list(plan) == plan_expected


def test_per_head_masks_join_their_spans():
    rng = np.random.default_rng(0)
    mask = np.full((4, 9, 500), -np.inf, np.float32)
    for h in range(4):
        for i in range(9):
            if (h + i) % 3:                                 # some heads see nothing, row 0 head 0 among them
                lo = int(rng.integers(0, 450))
                mask[h, i, lo:lo + int(rng.integers(1, 50))] = 0.0
    mask[:, 4] = -np.inf
    spans, plan = _spans(mask, 8)
    for (lo, hi), want in zip(spans, _expected(mask)):
        assert (lo >= hi) if want is None else (lo, hi) == want
    assert plan.sum() == 2
