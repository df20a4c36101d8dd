"""softmax kernels (being written)."""
