"""`python -m examples.llama ...` from the repository root: the same as `ggpy-llama ...` (ggpy/models/llama/cli.py)."""
from ggpy.models.llama.cli import main

main()
