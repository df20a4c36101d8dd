"""soft_max (mask F32/F16 broadcast over dims 2 and 3, scale, ALiBi slopes; one block per row, short rows one warp
per row) and diag_mask_inf (grid-stride); F32 and F16, sources with any strides. The softmax of windowed
attention is fused into win_attn (attention.py)."""
from __future__ import annotations

from ..registry import register
from .common import FLOATS, SUFFIX, row_launch, rows

SOFT_MAX_WARP_MAX = 32 * 8          # rows up to this long run one warp per row (soft_max_warp)
SOFT_MAX_WARP_BLOCK = 128


def _warp(node) -> bool:
    """Whether soft_max runs one warp per row: short rows, 32-bit row offsets within the tensors."""
    if node.op != "soft_max" or node.src[0].ne[0] > SOFT_MAX_WARP_MAX:
        return False
    ts = [t for t in (node, node.src[0], node.src[1] if len(node.src) > 1 else None) if t is not None]
    return all(abs(nb) * n < 1 << 31 for t in ts for n, nb in zip(t.ne, t.nb))


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 with a result of the same type"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node, impl=None) -> str:
    t = SUFFIX[node.src[0].type]
    if node.op == "diag_mask_inf":
        return f"diag_mask_inf_{t}"
    op = "soft_max_warp" if _warp(node) else "soft_max"
    if len(node.src) > 1 and node.src[1] is not None:
        return f"{op}_{t}_{SUFFIX[node.src[1].type]}"
    return f"{op}_{t}"


def params(node) -> tuple:
    if node.op == "diag_mask_inf":
        return (node.op_params["n_past"],)
    return node.op_params["scale"], node.op_params["max_bias"]


def launch_config(node):
    """soft_max: one block per row (threads by row length), short rows a warp each; diag_mask_inf grid-stride."""
    if node.op == "diag_mask_inf":
        return None
    if _warp(node):
        return -(-rows(node) // (SOFT_MAX_WARP_BLOCK // 32)), SOFT_MAX_WARP_BLOCK
    return row_launch(node)


register(ops=("soft_max", "diag_mask_inf"), refusal=refusal, name=kernel_name, params=params,
         launch_config=launch_config)
