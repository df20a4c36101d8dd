"""`python -m ggpy.models.mobilesam ...`: the same as `ggpy-sam ...`."""
from .cli import main

main()
