"""Llama-family text generation from GGUF files (llama, qwen2): model file checks, tokenizer, chat template,
sampling, the generation loop, and a float64 numpy reference forward. Run `ggpy-llama -h`."""
