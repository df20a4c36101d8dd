"""CPU kernel modules, one per op family. Importing this package registers them all."""
from . import elementwise, matmul, views  # noqa: F401
