"""The CUDA backend on NVIDIA's cuda-python (cuda.bindings): device memory, NVRTC-compiled kernels.

Importing this package needs no cuda-python; `CUDABackend` loads the driver bindings on first use.
"""


def __getattr__(name):
    if name == "CUDABackend":
        from .backend import CUDABackend
        return CUDABackend
    raise AttributeError(name)
