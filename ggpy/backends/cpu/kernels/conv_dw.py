"""conv_dw kernels (being written)."""
