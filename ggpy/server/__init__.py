"""ggpy-server: llama-family GGUF models behind an OpenAI-compatible HTTP API (cli.py, app.py), served by a
continuous-batching engine (engine.py)."""
