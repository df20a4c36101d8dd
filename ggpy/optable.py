"""The op table: every op a node can record, its family, and the facts the planner, the scheduler, the fusion
pass, both backends and test-backend-ops read from here (ggml's one enum and name table).

`family` names the module the op lives in, in every layer: `ggpy/ops/<family>.py`,
`ggpy/backends/cpu/kernels/<family>`, `ggpy/backends/cuda/kernels/<family>.py`,
`ggpy/test_backend_ops/cases/<family>.py` and `ggpy/test_backend_ops/references/<family>.py`. It imports nothing
of ggpy: the graph, the fusion pass and the planner read it without importing the op constructors (ggpy/ops).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    """One op. `constructors`: the ggpy functions that record it. `view`: the node only shows its source's bytes
    (nothing to compute; the scheduler keeps it with its source). `inplace`: its result may take over a source's
    block (same type and layout) when the planner allows. `unary`: one of ggml_unary's functions (`ggpy.unary`).
    `binary`: a binary op of ggml (b broadcast over a). `activation`: the id fused epilogues use for it (0: not
    fusable as an activation). `quantized`: the positions of the sources that may have a block-quantized type (all
    others refuse one when the node is built). `fuses`: the patterns of ggpy/graph/fusion.py a node of this op
    anchors, tried in order (whether a backend runs one is its kernel entry's Kernel.fuses); "chain" marks the
    elementwise ops (one value per element of the first source's shape). `bias`: how an epilogue's bias broadcasts
    over the op's result: "row" (over ne[0]), "channel" (over ne[2] of an image), "token" (over ne[2], the
    channels-first result read back as tokens through same-order views)."""

    name: str
    family: str
    constructors: tuple
    view: bool = False
    inplace: bool = False
    unary: bool = False
    binary: bool = False
    activation: int = 0
    quantized: tuple = ()
    fuses: tuple = ()
    bias: str = ""


def _table() -> dict:
    ops = []

    def add(family, name, constructors=None, **facts):
        ops.append(Op(name, family, tuple(constructors or (name,)), **facts))

    for name, ctors in (("view", ("view_1d", "view_2d", "view_3d", "view_4d", "view_tensor")),
                        ("reshape", ("reshape", "reshape_1d", "reshape_2d", "reshape_3d", "reshape_4d")),
                        ("permute", None), ("transpose", None)):
        add("view", name, ctors, view=True, quantized=(0,))
    add("layout", "dup")
    add("layout", "cont", ("cont", "cont_1d", "cont_2d", "cont_3d", "cont_4d"))
    add("layout", "cpy", quantized=(1,))    # a view of its destination (view_src) that the copy kernel writes
    add("layout", "cast", fuses=("chain",))
    add("layout", "concat")
    add("layout", "pad", ("pad", "pad_ext"))
    add("layout", "repeat")
    add("layout", "get_rows", quantized=(0,))
    add("layout", "set_rows", quantized=(2,))    # a view of its destination (view_src, source 2) whose rows it writes
    for name in ("win_part", "win_unpart", "get_rel_pos"):
        add("sam", name)
    add("sam", "add_rel_pos", inplace=True)
    for name in ("add", "sub", "mul", "div"):
        add("elementwise", name, inplace=True, binary=True, fuses=("chain",))
    add("elementwise", "scale", ("scale", "scale_bias"), inplace=True, fuses=("chain",))
    for name in ("clamp", "leaky_relu"):
        add("elementwise", name, inplace=True, fuses=("chain",))
    activations = ("gelu", "gelu_erf", "gelu_quick", "relu", "silu", "sigmoid", "tanh")
    for name in ("sqr", "sqrt", "log", "exp", "abs", "neg", "sgn", "step", "relu", "gelu", "gelu_erf", "gelu_quick",
                 "silu", "sigmoid", "tanh", "elu", "hardswish", "hardsigmoid", "softplus"):
        act = activations.index(name) + 1 if name in activations else 0
        add("elementwise", name, (name, "unary"), inplace=True, unary=True, activation=act, fuses=("chain",))
    for name in ("sin", "cos"):
        add("elementwise", name)
    for name in ("sum", "sum_rows", "mean"):
        add("reduce", name)
    for name in ("argmax", "top_k", "argsort"):
        add("topk", name)
    add("norm", "norm", inplace=True, fuses=("norm_affine",), bias="row")
    add("norm", "rms_norm", inplace=True, fuses=("add_rms_norm", "norm_rope_kv", "norm_mat_vec", "rms_norm_mul"))
    add("norm", "group_norm", inplace=True)
    add("softmax", "soft_max", ("soft_max", "soft_max_ext"), inplace=True)
    add("softmax", "diag_mask_inf", inplace=True)
    add("rope", "rope", ("rope", "rope_ext"), inplace=True, fuses=("rope_kv", "rope_set_rows"))  # each pair is read before it is written
    add("attention", "flash_attn_ext", quantized=(1, 2))     # K and V of a Q8_0 cache
    add("matmul", "mul_mat", quantized=(0,), fuses=("epilogue", "attention", "glu", "mul_mat_add"), bias="row")
    add("moe", "mul_mat_id", quantized=(0,))
    for name in ("im2col", "conv_1d", "conv_transpose_2d"):
        add("conv", name)
    add("conv", "conv_2d", fuses=("epilogue",), bias="channel")
    add("conv", "conv_2d_dw", fuses=("epilogue",), bias="token")
    add("pool", "pool_2d")
    add("pool", "upscale", ("upscale", "interpolate"))
    return {op.name: op for op in ops}


OPS: dict[str, Op] = _table()
FAMILIES = tuple(dict.fromkeys(op.family for op in OPS.values()))
UNARY_OPS = tuple(name for name, op in OPS.items() if op.unary)
ACTIVATIONS = {name: op.activation for name, op in OPS.items() if op.activation}


def is_view(node) -> bool:
    """Whether `node` only shows memory (a view op): no kernel computes it."""
    op = OPS.get(node.op)
    return op is not None and op.view


def may_run_inplace(node) -> bool:
    """Whether `node`'s op may write its result over one of its sources' blocks."""
    op = OPS.get(node.op)
    return op is not None and op.inplace
