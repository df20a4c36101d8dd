"""Every op constructor checks its arguments: bad shapes or types raise a GGPYError subclass whose message
names the op and the shapes (or values) given and expected. Good arguments give ggml's result shapes.

Constructors never compute, so these tests cover every op whether or not a kernel exists.
"""
from __future__ import annotations

import pytest

import ggpy

F32, F16, I32 = ggpy.F32, ggpy.F16, ggpy.I32


def T(ne, type_=F32):
    return ggpy.Context().new_tensor(type_, ne)


def ne_str(ne):
    return str(tuple(ne) + (1,) * (4 - len(ne)))


# (id, call, error class, substrings the message must contain)
BAD = [
    # elementwise
    ("add_not_broadcastable", lambda: ggpy.add(T((4, 3)), T((3, 3))), ggpy.ShapeError,
     ["add", ne_str((4, 3)), ne_str((3, 3))]),
    ("sub_bigger_b", lambda: ggpy.sub(T((4, 3)), T((4, 6))), ggpy.ShapeError, ["sub", ne_str((4, 6))]),
    ("mul_not_broadcastable", lambda: ggpy.mul(T((6, 4)), T((4, 4))), ggpy.ShapeError, ["mul", ne_str((4, 4))]),
    ("div_i32", lambda: ggpy.div(T((4,)), T((4,), I32)), ggpy.TypeMismatchError, ["div", "i32", ne_str((4,))]),
    ("add_not_a_tensor", lambda: ggpy.add(T((4,)), 2.0), ggpy.TypeMismatchError, ["add", "float"]),
    ("scale_i32", lambda: ggpy.scale(T((4,), I32), 2.0), ggpy.TypeMismatchError, ["scale", "i32"]),
    ("clamp_min_gt_max", lambda: ggpy.clamp(T((4,)), 1.0, -1.0), ggpy.ShapeError, ["clamp", "min=1.0", "max=-1.0"]),
    ("unary_unknown", lambda: ggpy.unary(T((4,)), "cube"), ggpy.ShapeError, ["unary", "cube", "gelu"]),
    ("gelu_i32", lambda: ggpy.gelu(T((4, 2), I32)), ggpy.TypeMismatchError, ["gelu", "i32", ne_str((4, 2))]),
    ("leaky_relu_i32", lambda: ggpy.leaky_relu(T((4,), I32)), ggpy.TypeMismatchError, ["leaky_relu", "i32"]),
    # mul_mat
    ("mul_mat_k_mismatch", lambda: ggpy.mul_mat(T((64, 32)), T((63, 16))), ggpy.ShapeError,
     ["mul_mat", ne_str((64, 32)), ne_str((63, 16)), "64", "63"]),
    ("mul_mat_broadcast", lambda: ggpy.mul_mat(T((8, 4, 3)), T((8, 2, 4))), ggpy.ShapeError,
     ["mul_mat", ne_str((8, 4, 3)), ne_str((8, 2, 4))]),
    ("mul_mat_broadcast_dim3", lambda: ggpy.mul_mat(T((8, 4, 1, 2)), T((8, 2, 1, 3))), ggpy.ShapeError,
     ["mul_mat", ne_str((8, 4, 1, 2)), ne_str((8, 2, 1, 3))]),
    ("mul_mat_i32", lambda: ggpy.mul_mat(T((8, 4), I32), T((8, 2))), ggpy.TypeMismatchError, ["mul_mat", "i32"]),
    # views
    ("reshape_count", lambda: ggpy.reshape_2d(T((4, 3)), 5, 2), ggpy.ShapeError,
     ["reshape_2d", ne_str((4, 3)), ne_str((5, 2)), "12", "10"]),
    ("reshape_like_count", lambda: ggpy.reshape(T((4, 3)), T((4, 4))), ggpy.ShapeError,
     ["reshape", ne_str((4, 3)), ne_str((4, 4))]),
    ("reshape_non_contiguous", lambda: ggpy.reshape_1d(ggpy.transpose(T((4, 3))), 12), ggpy.ShapeError,
     ["reshape_1d", "contiguous", ne_str((3, 4)), "cont"]),
    ("reshape_negative", lambda: ggpy.reshape_2d(T((4, 3)), -3, -4), ggpy.ShapeError, ["reshape_2d", "(-3, -4)"]),
    ("permute_repeated_axis", lambda: ggpy.permute(T((4, 3, 2)), 0, 0, 1, 2), ggpy.ShapeError,
     ["permute", "(0, 0, 1, 2)", ne_str((4, 3, 2))]),
    ("permute_axis_out_of_range", lambda: ggpy.permute(T((4, 3)), 1, 0, 2, 4), ggpy.ShapeError,
     ["permute", "(1, 0, 2, 4)"]),
    ("view_1d_too_long", lambda: ggpy.view_1d(T((4, 3)), 13), ggpy.ShapeError,
     ["view", ne_str((13,)), ne_str((4, 3)), "48 bytes"]),
    ("view_1d_offset_past_end", lambda: ggpy.view_1d(T((4, 3)), 4, 40), ggpy.ShapeError,
     ["view", "offset 40", ne_str((4, 3))]),
    ("view_negative_offset", lambda: ggpy.view_1d(T((4, 3)), 4, -4), ggpy.ShapeError, ["view", "offset -4"]),
    ("view_2d_rows_past_end", lambda: ggpy.view_2d(T((4, 3)), 4, 3, 16, 16), ggpy.ShapeError,
     ["view", ne_str((4, 3)), "offset 16"]),
    ("view_4d_strides_past_end", lambda: ggpy.view_4d(T((4, 3, 2)), 2, 2, 2, 2, 16, 48, 96), ggpy.ShapeError,
     ["view", ne_str((2, 2, 2, 2)), ne_str((4, 3, 2))]),
    ("view_of_view_past_base", lambda: ggpy.view_1d(ggpy.view_1d(T((8,)), 4, 16), 4, 8), ggpy.ShapeError,
     ["view", "offset 24", ne_str((8,))]),
    ("view_not_a_tensor", lambda: ggpy.view_1d([1, 2], 2), ggpy.TypeMismatchError, ["view_1d", "list"]),
    ("transpose_not_a_tensor", lambda: ggpy.transpose(None), ggpy.TypeMismatchError, ["transpose", "NoneType"]),
    # layout
    ("concat_mismatch", lambda: ggpy.concat(T((4, 3, 2)), T((4, 5, 3)), 1), ggpy.ShapeError,
     ["concat", ne_str((4, 3, 2)), ne_str((4, 5, 3)), "1"]),
    ("concat_types", lambda: ggpy.concat(T((4, 3)), T((4, 3), F16), 0), ggpy.ShapeError, ["concat", "f32", "f16"]),
    ("concat_bad_dim", lambda: ggpy.concat(T((4, 3)), T((4, 3)), 4), ggpy.ShapeError, ["concat", "4", "0..3"]),
    ("cont_2d_count", lambda: ggpy.cont_2d(T((4, 3)), 5, 3), ggpy.ShapeError,
     ["cont", ne_str((4, 3)), "(5, 3)", "12"]),
    ("cont_4d_count", lambda: ggpy.cont_4d(T((4, 3)), 2, 2, 2, 2), ggpy.ShapeError, ["cont", "(2, 2, 2, 2)"]),
    ("cpy_count", lambda: ggpy.cpy(T((4, 3)), T((4, 4))), ggpy.ShapeError,
     ["cpy", ne_str((4, 3)), ne_str((4, 4)), "12", "16"]),
    ("cpy_f32_into_i32", lambda: ggpy.cpy(T((4, 3)), T((12,), I32)), ggpy.ShapeError, ["cpy", "f32", "i32"]),
    ("repeat_not_tileable", lambda: ggpy.repeat(T((4, 3)), T((6, 3))), ggpy.ShapeError,
     ["repeat", ne_str((4, 3)), ne_str((6, 3))]),
    ("pad_negative", lambda: ggpy.pad(T((4, 3)), -1), ggpy.ShapeError, ["pad", "-1"]),
    ("pad_ext_fraction", lambda: ggpy.pad_ext(T((4, 3)), 0.5), ggpy.ShapeError, ["pad", "0.5"]),
    ("get_rows_float_indices", lambda: ggpy.get_rows(T((8, 10)), T((3,))), ggpy.TypeMismatchError,
     ["get_rows", "f32", "i32", ne_str((3,))]),
    ("get_rows_f16_indices", lambda: ggpy.get_rows(T((8, 10)), T((3,), F16)), ggpy.TypeMismatchError,
     ["get_rows", "f16", "i32"]),
    ("get_rows_batch_mismatch", lambda: ggpy.get_rows(T((8, 10, 2)), T((3, 3), I32)), ggpy.ShapeError,
     ["get_rows", ne_str((8, 10, 2)), ne_str((3, 3))]),
    ("get_rows_4d_indices", lambda: ggpy.get_rows(T((8, 10)), T((3, 1, 1, 2), I32)), ggpy.ShapeError,
     ["get_rows", ne_str((3, 1, 1, 2))]),
    ("win_part_zero_window", lambda: ggpy.win_part(T((4, 6, 6)), 0), ggpy.ShapeError, ["win_part", "0"]),
    ("win_unpart_wrong_shape", lambda: ggpy.win_unpart(T((4, 3, 3, 3)), 6, 6, 3), ggpy.ShapeError,
     ["win_unpart", ne_str((4, 3, 3, 3)), "(4, 3, 3, B * 4)"]),
    ("win_unpart_batch_not_multiple", lambda: ggpy.win_unpart(T((4, 3, 3, 6)), 6, 6, 3), ggpy.ShapeError,
     ["win_unpart", ne_str((4, 3, 3, 6)), "(4, 3, 3, B * 4)", "multiple of 4"]),
    ("win_unpart_wrong_window", lambda: ggpy.win_unpart(T((4, 2, 2, 4)), 6, 6, 3), ggpy.ShapeError,
     ["win_unpart", ne_str((4, 2, 2, 4)), "(4, 3, 3, B * 4)"]),
    ("get_rel_pos_q_ne_k", lambda: ggpy.get_rel_pos(T((4, 5)), 3, 2), ggpy.ShapeError, ["get_rel_pos", "qh=3", "kh=2"]),
    ("get_rel_pos_wrong_length", lambda: ggpy.get_rel_pos(T((4, 6)), 3, 3), ggpy.ShapeError,
     ["get_rel_pos", ne_str((4, 6)), "(4, 5, 1, 1)"]),
    ("add_rel_pos_mismatch", lambda: ggpy.add_rel_pos(T((9, 4, 1)), T((3, 2, 2, 1)), T((3, 2, 3, 1))),
     ggpy.ShapeError, ["add_rel_pos", ne_str((3, 2, 2, 1)), ne_str((3, 2, 3, 1))]),
    ("add_rel_pos_wrong_a", lambda: ggpy.add_rel_pos(T((8, 4, 1)), T((3, 2, 2, 1)), T((3, 2, 2, 1))),
     ggpy.ShapeError, ["add_rel_pos", ne_str((8, 4, 1)), "(9, 4, 1)"]),
    # norm, reductions, softmax
    ("norm_negative_eps", lambda: ggpy.norm(T((4,)), -1e-5), ggpy.ShapeError, ["norm", "eps", "-1e-05"]),
    ("rms_norm_nan_eps", lambda: ggpy.rms_norm(T((4,)), float("nan")), ggpy.ShapeError, ["rms_norm", "nan"]),
    ("rms_norm_i32", lambda: ggpy.rms_norm(T((4,), I32)), ggpy.TypeMismatchError, ["rms_norm", "i32"]),
    ("group_norm_zero_groups", lambda: ggpy.group_norm(T((4, 4, 8)), 0), ggpy.ShapeError, ["group_norm", "0"]),
    ("group_norm_float_groups", lambda: ggpy.group_norm(T((4, 4, 8)), 2.5), ggpy.ShapeError, ["group_norm", "2.5"]),
    ("sum_i32", lambda: ggpy.sum(T((4,), I32)), ggpy.TypeMismatchError, ["sum", "i32"]),
    ("mean_i32", lambda: ggpy.mean(T((4, 2), I32)), ggpy.TypeMismatchError, ["mean", "i32", ne_str((4, 2))]),
    ("argmax_3d", lambda: ggpy.argmax(T((4, 3, 2))), ggpy.ShapeError, ["argmax", ne_str((4, 3, 2))]),
    ("soft_max_i32", lambda: ggpy.soft_max(T((4,), I32)), ggpy.TypeMismatchError, ["soft_max", "i32"]),
    ("soft_max_ext_mask_cols", lambda: ggpy.soft_max_ext(T((8, 4)), T((7, 4))), ggpy.ShapeError,
     ["soft_max_ext", ne_str((7, 4)), ne_str((8, 4))]),
    ("soft_max_ext_mask_rows", lambda: ggpy.soft_max_ext(T((8, 4)), T((8, 3))), ggpy.ShapeError,
     ["soft_max_ext", ne_str((8, 3)), ne_str((8, 4))]),
    ("soft_max_ext_mask_heads", lambda: ggpy.soft_max_ext(T((8, 4, 3)), T((8, 4, 2))), ggpy.ShapeError,
     ["soft_max_ext", ne_str((8, 4, 2)), ne_str((8, 4, 3))]),
    ("soft_max_ext_mask_i32", lambda: ggpy.soft_max_ext(T((8, 4)), T((8, 4), I32)), ggpy.TypeMismatchError,
     ["soft_max_ext", "mask", "i32"]),
    ("soft_max_ext_alibi_without_mask", lambda: ggpy.soft_max_ext(T((8, 4)), None, 1.0, 8.0), ggpy.ShapeError,
     ["soft_max_ext", "max_bias", "mask"]),
    ("diag_mask_inf_i32", lambda: ggpy.diag_mask_inf(T((4, 4), I32), 0), ggpy.TypeMismatchError,
     ["diag_mask_inf", "i32"]),
    ("set_rows_row_width", lambda: ggpy.set_rows(T((8, 10)), T((7, 3)), T((3,), I32)), ggpy.ShapeError,
     ["set_rows", ne_str((8, 10)), ne_str((7, 3))]),
    ("set_rows_index_count", lambda: ggpy.set_rows(T((8, 10)), T((8, 3)), T((4,), I32)), ggpy.ShapeError,
     ["set_rows", ne_str((8, 3)), ne_str((4,))]),
    ("set_rows_index_f32", lambda: ggpy.set_rows(T((8, 10)), T((8, 3)), T((3,))), ggpy.TypeMismatchError,
     ["set_rows", "'c'", "f32"]),
    ("set_rows_into_i32", lambda: ggpy.set_rows(T((8, 10), I32), T((8, 3)), T((3,), I32)), ggpy.TypeMismatchError,
     ["set_rows", "i32"]),
    ("flash_attn_ext_q_f16", lambda: ggpy.flash_attn_ext(T((8, 3, 4), F16), T((8, 5, 2)), T((8, 5, 2))),
     ggpy.TypeMismatchError, ["flash_attn_ext", "f16", "expected f32"]),
    ("flash_attn_ext_heads", lambda: ggpy.flash_attn_ext(T((8, 3, 4)), T((8, 5, 3)), T((8, 5, 3))), ggpy.ShapeError,
     ["flash_attn_ext", ne_str((8, 3, 4)), ne_str((8, 5, 3))]),
    ("flash_attn_ext_v_rows", lambda: ggpy.flash_attn_ext(T((8, 3, 4)), T((8, 5, 2)), T((8, 6, 2))),
     ggpy.ShapeError, ["flash_attn_ext", ne_str((8, 6, 2))]),
    ("flash_attn_ext_mask", lambda: ggpy.flash_attn_ext(T((8, 3, 4)), T((8, 5, 2)), T((8, 5, 2)), T((5, 2), F16)),
     ggpy.ShapeError, ["flash_attn_ext", "mask", ne_str((5, 2))]),
    ("flash_attn_ext_strided_rows", lambda: ggpy.flash_attn_ext(T((8, 3, 4)), ggpy.transpose(T((5, 8, 2))),
                                                                T((8, 5, 2))), ggpy.ShapeError, ["contiguous"]),
    ("flash_attn_ext_alibi_without_mask", lambda: ggpy.flash_attn_ext(T((8, 3, 4)), T((8, 5, 2)), T((8, 5, 2)), None,
                                                                      1.0, 8.0), ggpy.ShapeError, ["max_bias", "mask"]),
    # rope
    ("rope_n_dims_odd", lambda: ggpy.rope(T((8, 2, 3)), T((3,), I32), 7, 0), ggpy.ShapeError,
     ["rope_ext", "n_dims=7", ne_str((8, 2, 3))]),
    ("rope_n_dims_past_ne0", lambda: ggpy.rope(T((8, 2, 3)), T((3,), I32), 10, 2), ggpy.ShapeError,
     ["rope_ext", "n_dims=10", "a.ne[0]=8"]),
    ("rope_positions_f32", lambda: ggpy.rope(T((8, 2, 3)), T((3,)), 8, 0), ggpy.TypeMismatchError,
     ["rope_ext", "I32 positions", "f32"]),
    ("rope_positions_count", lambda: ggpy.rope(T((8, 2, 3)), T((4,), I32), 8, 0), ggpy.ShapeError,
     ["rope_ext", "ne=(3,)", ne_str((4,))]),
    ("rope_mode", lambda: ggpy.rope(T((8, 2, 3)), T((3,), I32), 8, 1), ggpy.ShapeError, ["rope_ext", "mode=1"]),
    ("rope_a_i32", lambda: ggpy.rope(T((8, 2, 3), I32), T((3,), I32), 8, 0), ggpy.TypeMismatchError,
     ["rope_ext", "i32"]),
    ("rope_factors_f16", lambda: ggpy.rope_ext(T((8, 2, 3)), T((3,), I32), T((4,), F16), 8, 0, 0, 1e4, 1.0, 0.0, 1.0,
                                               32.0, 1.0), ggpy.TypeMismatchError, ["frequency factors", "f16"]),
    ("rope_factors_short", lambda: ggpy.rope_ext(T((8, 2, 3)), T((3,), I32), T((3,)), 8, 0, 0, 1e4, 1.0, 0.0, 1.0,
                                                 32.0, 1.0), ggpy.ShapeError, ["n_dims / 2 = 4"]),
    ("rope_yarn_without_context", lambda: ggpy.rope_ext(T((8, 2, 3)), T((3,), I32), None, 8, 0, 0, 1e4, 0.5, 1.0,
                                                        1.0, 32.0, 1.0), ggpy.ShapeError, ["n_ctx_orig >= 1"]),
    ("rope_base_str", lambda: ggpy.rope_ext(T((8, 2, 3)), T((3,), I32), None, 8, 0, 0, "1e4", 1.0, 0.0, 1.0,
                                            32.0, 1.0), ggpy.TypeMismatchError, ["freq_base", "str"]),
    ("cast_to_i32", lambda: ggpy.cast(T((4, 3)), I32), ggpy.TypeMismatchError, ["cast", "i32", "F32, F16 or BF16"]),
    ("cast_from_i32", lambda: ggpy.cast(T((4, 3), I32), F16), ggpy.TypeMismatchError, ["cast", "i32"]),
    ("cast_unknown_type", lambda: ggpy.cast(T((4, 3)), "f8"), ggpy.TypeMismatchError, ["'f8'"]),
]


@pytest.mark.parametrize("call, error, parts", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_raise_clear_errors(call, error, parts):
    with pytest.raises(error) as ei:
        call()
    assert isinstance(ei.value, ggpy.GGPYError)
    msg = str(ei.value)
    for p in parts:
        assert p in msg, f"{p!r} missing from: {msg}"


def test_failed_constructor_records_no_node():
    ctx = ggpy.Context()
    a = ctx.new_tensor(F32, (4, 3))
    b = ctx.new_tensor(F32, (3, 3))
    n = len(ctx.tensors)
    with pytest.raises(ggpy.ShapeError):
        ggpy.mul_mat(a, b)
    with pytest.raises(ggpy.ShapeError):
        ggpy.add(a, b)
    assert len(ctx.tensors) == n


# -- good arguments: ggml's result shapes and types ------------------------------------------------------
GOOD = [
    ("add_broadcast", lambda: ggpy.add(T((4, 6, 2)), T((4, 3, 1))), (4, 6, 2, 1), F32),
    ("mul_f16", lambda: ggpy.mul(T((4, 6), F16), T((1, 6), F16)), (4, 6, 1, 1), F16),
    ("scale", lambda: ggpy.scale(T((5, 2)), 0.5), (5, 2, 1, 1), F32),
    ("mul_mat", lambda: ggpy.mul_mat(T((64, 32)), T((64, 16))), (32, 16, 1, 1), F32),
    ("mul_mat_f16_broadcast", lambda: ggpy.mul_mat(T((8, 4, 2, 1), F16), T((8, 5, 6, 3))), (4, 5, 6, 3), F32),
    ("reshape_3d", lambda: ggpy.reshape_3d(T((4, 6)), 2, 3, 4), (2, 3, 4, 1), F32),
    ("permute", lambda: ggpy.permute(T((2, 3, 4, 5)), 1, 2, 3, 0), (5, 2, 3, 4), F32),
    ("transpose", lambda: ggpy.transpose(T((2, 3, 4))), (3, 2, 4, 1), F32),
    ("view_2d", lambda: ggpy.view_2d(T((4, 3)), 2, 3, 16, 8), (2, 3, 1, 1), F32),
    ("concat", lambda: ggpy.concat(T((4, 3, 2)), T((4, 5, 2)), 1), (4, 8, 2, 1), F32),
    ("cont_2d", lambda: ggpy.cont_2d(ggpy.transpose(T((4, 3))), 6, 2), (6, 2, 1, 1), F32),
    ("cpy_to_f16", lambda: ggpy.cpy(T((4, 3)), T((12,), F16)), (12, 1, 1, 1), F16),
    ("pad", lambda: ggpy.pad(T((4, 3)), 1, 2), (5, 5, 1, 1), F32),
    ("pad_ext", lambda: ggpy.pad_ext(T((4, 3)), 1, 2, 0, 1), (7, 4, 1, 1), F32),
    ("repeat", lambda: ggpy.repeat(T((4, 1)), T((8, 3))), (8, 3, 1, 1), F32),
    ("get_rows", lambda: ggpy.get_rows(T((8, 10, 2)), T((3, 2), I32)), (8, 3, 2, 1), F32),
    ("get_rows_i32", lambda: ggpy.get_rows(T((8, 10), I32), T((3,), I32)), (8, 3, 1, 1), I32),
    ("win_part", lambda: ggpy.win_part(T((4, 7, 5)), 3), (4, 3, 3, 6), F32),
    ("win_unpart", lambda: ggpy.win_unpart(T((4, 3, 3, 6)), 7, 5, 3), (4, 7, 5, 1), F32),
    ("win_part_batch", lambda: ggpy.win_part(T((4, 7, 5, 3)), 3), (4, 3, 3, 18), F32),
    ("win_unpart_batch", lambda: ggpy.win_unpart(T((4, 3, 3, 18)), 7, 5, 3), (4, 7, 5, 3), F32),
    ("get_rel_pos", lambda: ggpy.get_rel_pos(T((4, 5)), 3, 3), (4, 3, 3, 1), F32),
    ("add_rel_pos", lambda: ggpy.add_rel_pos(T((9, 4, 1)), T((3, 2, 2, 1)), T((3, 2, 2, 1))), (9, 4, 1, 1), F32),
    ("sum", lambda: ggpy.sum(T((4, 3))), (1, 1, 1, 1), F32),
    ("sum_rows", lambda: ggpy.sum_rows(T((4, 3, 2))), (1, 3, 2, 1), F32),
    ("mean", lambda: ggpy.mean(T((4, 3), F16)), (1, 3, 1, 1), F16),
    ("argmax", lambda: ggpy.argmax(T((4, 3))), (3, 1, 1, 1), I32),
    ("group_norm", lambda: ggpy.group_norm(T((4, 4, 6)), 4), (4, 4, 6, 1), F32),
    ("soft_max_ext", lambda: ggpy.soft_max_ext(T((8, 4, 6)), T((8, 5, 3), F16), 0.5, 8.0), (8, 4, 6, 1), F32),
    ("diag_mask_inf", lambda: ggpy.diag_mask_inf(T((4, 4)), 1), (4, 4, 1, 1), F32),
    ("set_rows", lambda: ggpy.set_rows(T((8, 10, 2), F16), T((8, 3, 2)), T((3, 2), I32)), (8, 10, 2, 1), F16),
    ("flash_attn_ext", lambda: ggpy.flash_attn_ext(T((8, 3, 6)), T((8, 5, 2)), T((4, 5, 2)), T((5, 4), F16)),
     (4, 6, 3, 1), F32),
    ("rope", lambda: ggpy.rope(T((8, 4, 3), F16), T((3,), I32), 6, 2), (8, 4, 3, 1), F16),
    ("rope_ext", lambda: ggpy.rope_ext(T((8, 4, 3, 2)), T((3,), I32), T((5,)), 8, 0, 4096, 1e5, 0.25, 1.0, 1.0, 32.0,
                                       1.0), (8, 4, 3, 2), F32),
    ("cast", lambda: ggpy.cast(ggpy.permute(T((4, 3, 2)), 2, 0, 1, 3), ggpy.BF16), (3, 2, 4, 1), ggpy.BF16),
    ("cast_by_name", lambda: ggpy.cast(T((4, 3), F16), "f32"), (4, 3, 1, 1), F32),
]


@pytest.mark.parametrize("call, ne, type_", [g[1:] for g in GOOD], ids=[g[0] for g in GOOD])
def test_good_arguments_give_ggml_shapes(call, ne, type_):
    t = call()
    assert t.ne == ne
    assert t.type is type_
    assert t.op is not None and t.src and all(isinstance(s, ggpy.Tensor) for s in t.src if s is not None)
    if not t.is_view():
        assert t.is_contiguous()
