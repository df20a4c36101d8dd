"""Batch jobs over many images: `encode-dir` (in this process or on a Ray cluster)."""
