"""The GGPYError family: every error ggpy raises on purpose says what was given and what was expected."""


class GGPYError(Exception):
    """Base class of all errors raised by ggpy."""


class ShapeError(GGPYError, ValueError):
    """Tensor shapes (ne) or strides (nb) do not fit what an op or a call expects."""


class TypeMismatchError(GGPYError, TypeError):
    """A tensor or array has a type that an op or a call does not accept."""


class UnsupportedOpError(GGPYError):
    """A backend cannot run a node (op, types or layout)."""


class RowIndexError(GGPYError, IndexError):
    """get_rows was given a row index outside the rows of its source."""


class OutOfMemoryError(GGPYError, MemoryError):
    """A buffer could not be allocated or a tensor does not fit a buffer type's maximum size."""


class AllocationError(GGPYError):
    """A tensor has no memory (not planned yet) or its memory was released for reuse."""


class ModelFileError(GGPYError):
    """A model file is truncated, malformed or of another architecture."""


class CudaError(GGPYError):
    """A CUDA driver, NVRTC or cuBLAS call failed."""


class OptionError(GGPYError, TypeError):
    """A call was given an option (keyword) it does not take."""


class TensorNameError(GGPYError, LookupError):
    """A graph has no input or output of the name (or tensor) given."""
