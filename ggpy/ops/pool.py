"""pool ops (being written)."""
__all__ = []
