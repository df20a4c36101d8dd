"""The conv family on the CPU: dense conv_2d/conv_1d and im2col (im2col + GEMM, 1x1 GEMM, Winograd F(2x2,3x3),
direct), depthwise conv_2d_dw (WHCN and CWHN) and conv_transpose_2d. Importing it registers them all."""
from . import dense, depthwise, transpose  # noqa: F401 - registers the kernels
