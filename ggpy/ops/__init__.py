"""Op constructors: they check arguments, infer the result's shape and type, and record a node.

They never compute. Names, argument order and result shapes follow ggml. Every op is in the op table
(ggpy/optable.py), with the family module that holds its constructors.
"""
from .attention import flash_attn_ext
from .conv import *  # noqa: F401,F403 - im2col, conv_1d, conv_2d, conv_2d_dw, conv_transpose_2d
from .elementwise import (UNARY_OPS, abs, add, clamp, cos, div, elu, exp, gelu, gelu_erf, gelu_quick, hardsigmoid,
                          hardswish, leaky_relu, log, mul, neg, relu, scale, scale_bias, sgn, sigmoid, silu, sin, softplus, sqr,
                          sqrt, step, sub, tanh, unary)
from .layout import (cast, concat, cont, cont_1d, cont_2d, cont_3d, cont_4d, cpy, dup, get_rows, pad, pad_ext, repeat,
                     set_rows)
from .matmul import mul_mat
from .moe import mul_mat_id
from .norm import group_norm, norm, rms_norm
from .pool import *  # noqa: F401,F403 - pool_2d, upscale, interpolate
from .reduce import mean, sum, sum_rows
from .rope import rope, rope_ext
from .sam import add_rel_pos, get_rel_pos, win_part, win_unpart
from .softmax import diag_mask_inf, soft_max, soft_max_ext
from .topk import argmax, argsort, top_k
from .view import (permute, reshape, reshape_1d, reshape_2d, reshape_3d, reshape_4d, transpose, view_1d, view_2d,
                   view_3d, view_4d, view_tensor)

__all__ = [n for n, v in dict(globals()).items() if callable(v) and not n.startswith("_")] + ["UNARY_OPS"]
