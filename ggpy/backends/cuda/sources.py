"""The CUDA C sources: kernels/*.cu (one per op family; a family whose kernels take long to compile is split in a few
files, its templates in a kernels/<family>.cuh), the headers they include (kernels/*.cuh: common.cuh the Args struct,
conversions and reductions, ops.cuh the elementwise math) and which file defines each kernel (the `extern "C"
__global__` names; the launch code names kernels, the backend compiles the files they are in). Specialisations are
template parameters and -D options (options(): values the Python side decides). Pure Python: importing it needs no
cuda-python.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import CudaError
from ...optable import ACTIVATIONS
from .kernels.conv import DIRECT_K, DIRECT_W
from .kernels.quant import MMV_MAX_N, MMVQ_MAX_BATCH

KERNEL_DIR = Path(__file__).parent / "kernels"
_KERNEL = re.compile(r'^extern "C" __global__ void (?:[A-Z_0-9]+ )?(\w+)\(', re.M)     # an attribute macro may come first


@dataclass(frozen=True)
class Source:
    """One NVRTC program: `name` (its file name in NVRTC's messages, and the cache file's prefix), its text and its
    options (-D defines)."""

    name: str
    text: str
    options: tuple = ()


@functools.cache
def options() -> tuple:
    """The -D options of every source: the op table's activation ids (ops.cuh's epilogue_act) and the sizes the
    Python side shares with the kernels."""
    defines = {f"GGPY_ACT_{name.upper()}": i for name, i in ACTIVATIONS.items()}
    defines |= {"DIRECT_K": DIRECT_K, "DIRECT_W": DIRECT_W, "MMV_MAX_N": MMV_MAX_N,
                "MMVQ_MAX_BATCH": MMVQ_MAX_BATCH}
    return tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))


@functools.cache
def files() -> dict[str, Source]:
    """{file stem: Source} of every kernels/*.cu."""
    return {p.stem: Source(p.name, p.read_text(), options()) for p in sorted(KERNEL_DIR.glob("*.cu"))}


@functools.cache
def index() -> dict[str, str]:
    """{kernel name: stem of the .cu file that defines it}."""
    return {name: stem for stem, src in files().items() for name in _KERNEL.findall(src.text)}


def source_of(kernel: str) -> Source:
    """The Source that defines `kernel`."""
    stem = index().get(kernel)
    if stem is None:
        raise CudaError(f"no CUDA kernel named {kernel!r} in {KERNEL_DIR}/*.cu")
    return files()[stem]


def chain_program(kernels) -> Source:
    """One program of generated chain kernels (their CUDA C, kernels/generated.py), with the headers they use."""
    head = '#include "common.cuh"\n#include "ops.cuh"\n#include "generated.cuh"\n'
    return Source("ggpy_generated.cu", head + "".join(kernels), options())
