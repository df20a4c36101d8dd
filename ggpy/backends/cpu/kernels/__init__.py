"""CPU kernel modules, one per op family of the op table (views need none). Importing this package registers them
all; common, fp16, mathfn, convert, activations, blas and gemm are the helpers they share (no family imports
another)."""
import importlib
import warnings

from numba.core.errors import NumbaExperimentalFeatureWarning, NumbaIRAssumptionWarning

# Inlining scalar helpers that assign in branches trips numba's pedantic SSA check (harmless), and
# picking a scalar function from a tuple by a constant op code uses first-class function types.
warnings.filterwarnings("ignore", category=NumbaIRAssumptionWarning)
warnings.filterwarnings("ignore", category=NumbaExperimentalFeatureWarning)

from ....optable import OPS  # noqa: E402

for _family in dict.fromkeys(op.family for op in OPS.values() if not op.view):
    importlib.import_module(f"{__name__}.{_family}")
