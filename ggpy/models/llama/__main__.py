"""`python -m ggpy.models.llama ...`: the same as `ggpy-llama ...`."""
from .cli import main

main()
