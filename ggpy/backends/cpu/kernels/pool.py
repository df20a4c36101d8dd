"""pool kernels (being written)."""
