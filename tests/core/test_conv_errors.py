"""im2col, conv_1d and conv_2d reject bad arguments when the graph is built, saying what was wrong."""
import pytest

import ggpy
from ggpy import ops
from ggpy.errors import ShapeError, TypeMismatchError


@pytest.fixture
def ctx():
    return ggpy.Context()


def test_kernel_larger_than_padded_input(ctx):
    a = ctx.new_tensor(ggpy.F32, (5, 3, 2, 4))
    b = ctx.new_tensor(ggpy.F32, (3, 8, 2, 1))
    with pytest.raises(ShapeError, match=r"conv_2d: .*larger than the padded input 3 \(width=3, p=0\)"):
        ops.conv_2d(a, b)
    assert ops.conv_2d(a, b, p0=1).ne == (1, 6, 4, 1)
    with pytest.raises(ShapeError, match="conv_2d: .*height"):
        ops.conv_2d(a, b, p0=1, d1=4)


@pytest.mark.parametrize("params, what", [({"s0": 0}, "stride s0 must be an int >= 1, got 0"),
                                          ({"s1": -1}, "stride s1 must be an int >= 1, got -1"),
                                          ({"d0": 0}, "dilation d0 must be an int >= 1, got 0"),
                                          ({"p1": -1}, "padding p1 must be an int >= 0, got -1"),
                                          ({"s0": 1.5}, "s0 must be an int")])
def test_bad_parameters(ctx, params, what):
    a = ctx.new_tensor(ggpy.F32, (3, 3, 2, 4))
    b = ctx.new_tensor(ggpy.F32, (8, 8, 2, 1))
    with pytest.raises(ShapeError, match=f"conv_2d: .*{what}"):
        ops.conv_2d(a, b, **params)


def test_channel_mismatch(ctx):
    with pytest.raises(ShapeError, match="conv_2d: kernel a .*has 2 input channels but input b .* has 3"):
        ops.conv_2d(ctx.new_tensor(ggpy.F32, (3, 3, 2, 4)), ctx.new_tensor(ggpy.F32, (8, 8, 3, 1)))
    with pytest.raises(ShapeError, match="conv_1d: kernel a .*5 input channels but input b .* has 4"):
        ops.conv_1d(ctx.new_tensor(ggpy.F32, (3, 5, 2)), ctx.new_tensor(ggpy.F32, (10, 4, 1)))
    with pytest.raises(ShapeError, match="im2col: kernel a"):
        ops.im2col(ctx.new_tensor(ggpy.F16, (3, 3, 2, 4)), ctx.new_tensor(ggpy.F32, (8, 8, 3, 1)), 1, 1, 0, 0, 1, 1)


def test_wrong_types(ctx):
    with pytest.raises(TypeMismatchError, match="conv_2d: 'a' has type i32"):
        ops.conv_2d(ctx.new_tensor(ggpy.I32, (3, 3, 2, 4)), ctx.new_tensor(ggpy.F32, (8, 8, 2, 1)))
    with pytest.raises(TypeMismatchError, match="conv_1d: 'b' has type i32"):
        ops.conv_1d(ctx.new_tensor(ggpy.F32, (3, 2, 4)), ctx.new_tensor(ggpy.I32, (8, 2, 1)))
    with pytest.raises(TypeMismatchError, match="conv_2d: argument 'b' must be a ggpy Tensor"):
        ops.conv_2d(ctx.new_tensor(ggpy.F32, (3, 3, 2, 4)), [1, 2])
    with pytest.raises(ShapeError, match="im2col: dst_type"):
        ops.im2col(ctx.new_tensor(ggpy.F16, (3, 3, 2, 4)), ctx.new_tensor(ggpy.F32, (8, 8, 2, 1)),
                   1, 1, 0, 0, 1, 1, True, ggpy.I32)


def test_conv_1d_shapes(ctx):
    a = ctx.new_tensor(ggpy.F32, (4, 2, 3))
    with pytest.raises(ShapeError, match="conv_1d: .*larger than the padded input"):
        ops.conv_1d(a, ctx.new_tensor(ggpy.F32, (3, 2, 1)))
    with pytest.raises(ShapeError, match="conv_1d: 'b' .* must be 3-d"):
        ops.conv_1d(a, ctx.new_tensor(ggpy.F32, (9, 2, 1, 2)))
    with pytest.raises(ShapeError, match="conv_1d: stride s0 must be an int >= 1, got 0"):
        ops.conv_1d(a, ctx.new_tensor(ggpy.F32, (9, 2, 1)), s0=0)
    assert ops.conv_1d(a, ctx.new_tensor(ggpy.F32, (9, 2, 5)), 2, 1, 2).ne == (3, 3, 5, 1)
