"""cuda.bindings' driver module, and `check`, through which every driver call's result goes (NVRTC's: compiler.py)."""
from __future__ import annotations

from ...errors import CudaError

try:
    from cuda.bindings import driver
except ImportError as e:        # cuda-python is the optional 'cuda' extra
    raise CudaError(f"the CUDA backend needs NVIDIA's cuda-python (pip install 'ggpy[cuda]'): {e}") from None

_OK = (driver.CUresult.CUDA_SUCCESS,)


def error_name(err) -> str:
    """'CUDA_ERROR_OUT_OF_MEMORY' for a driver result code."""
    return getattr(err, "name", None) or str(err)


def check(result, call: str):
    """The values of a cuda.bindings result tuple (err, *values): None, the one value, or a tuple.
    Raises CudaError("<call> failed: <ERROR_NAME>") when err is not success."""
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err not in _OK:
        raise CudaError(f"{call} failed: {error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values
