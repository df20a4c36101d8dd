"""CPU kernel modules, one per op family. Importing this package registers them all."""
from . import elementwise, layout, matmul, norm, reduce, softmax, views  # noqa: F401
