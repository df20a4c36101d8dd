"""norm kernels (being written)."""
