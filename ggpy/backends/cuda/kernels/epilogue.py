"""What the fused epilogues of several families share (norm_affine, the conv kernels): the id of a fusion's activation,
which their kernels pass to ops.cuh's epilogue_act (the op table's activation ids, sources.options)."""
from __future__ import annotations

from ....optable import ACTIVATIONS


def act_id(fusion) -> int:
    """The kernel's iop for a fusion's activation (0: none)."""
    return ACTIVATIONS.get(fusion.act, 0) if fusion is not None else 0
