"""float64 references for conv ops (being written)."""
