"""sum_rows, mean (one block per row) and sum (one block); F32, F16 and BF16 sources with any strides, sums in
double."""
from __future__ import annotations

from ..registry import register
from .common import FLOATS, SUFFIX, row_launch, rows


def refusal(node) -> str | None:
    x = node.src[0]
    if x.type not in FLOATS or node.type != x.type:
        return f"{node.op} on CUDA takes an F32/F16/BF16 source; got {x.type.name} -> {node.type.name}"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node, impl=None) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def launch_config(node) -> tuple:
    """One block per row (one block in all for sum); threads by row length."""
    if node.op == "sum":
        return 1, 1024
    return row_launch(node)


register(ops=("sum", "sum_rows", "mean"), refusal=refusal, name=kernel_name,
         launch_config=launch_config)
