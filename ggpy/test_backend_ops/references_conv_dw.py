"""float64 references for conv_dw ops (being written)."""
