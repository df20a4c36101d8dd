"""conv kernels (being written)."""
