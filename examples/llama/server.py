"""`python -m examples.llama.server ...` from the repository root: the same as `ggpy-server ...` (ggpy/server/cli.py)."""
from ggpy.server.cli import main

main()
