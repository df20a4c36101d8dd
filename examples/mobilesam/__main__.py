"""`python -m examples.mobilesam ...` from the repository root: the same as `ggpy-sam ...` (ggpy/models/mobilesam/cli.py)."""
from ggpy.models.mobilesam.cli import main

main()
