"""layout kernels (being written)."""
