"""reduce kernels (being written)."""
