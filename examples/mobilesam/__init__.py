"""MobileSAM example: GGUF conversion of the official checkpoint, pre-processing, the image encoder runner."""
