"""conv_dw ops (being written)."""
__all__ = []
