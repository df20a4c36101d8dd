"""CPU kernel modules, one per op family. Importing this package registers them all."""
import warnings

from numba.core.errors import NumbaExperimentalFeatureWarning, NumbaIRAssumptionWarning

# Inlining scalar helpers that assign in branches trips numba's pedantic SSA check (harmless), and
# picking a scalar function from a tuple by a constant op code uses first-class function types.
warnings.filterwarnings("ignore", category=NumbaIRAssumptionWarning)
warnings.filterwarnings("ignore", category=NumbaExperimentalFeatureWarning)

from . import conv, conv_dw, conv_transpose, elementwise, layout, matmul, norm, pool, reduce, softmax, views  # noqa: E402,F401
