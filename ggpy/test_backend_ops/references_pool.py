"""float64 references for pool ops (being written)."""
