"""make_backend(name, **options): the backends' constructor options by name, and a clear error for one they lack."""
from __future__ import annotations

import subprocess
import sys

import pytest

import ggpy
from ggpy.backends import make_backend


def test_cpu_options_reach_the_backend():
    b = make_backend("cpu", 3, fuse=False, autotune=True, scratch_budget=1 << 20, force={"mul_mat": "gemm"})
    assert (b.n_threads, b.fuse, b.autotune, b.scratch_budget, b.force) == (3, False, True, 1 << 20, {"mul_mat": "gemm"})
    assert make_backend("cpu", n_threads=2).n_threads == 2 and make_backend("cpu").fuse


def test_unknown_cpu_option_names_backend_option_and_accepted_ones_without_importing_cuda():
    code = ("import sys, ggpy\nfrom ggpy.backends import make_backend\n"
            "try:\n    make_backend('cpu', allow_tf32=True)\nexcept ggpy.OptionError as e:\n    print(e)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('cuda', 'ggpy.backends.cuda'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ("backend 'cpu' (CPUBackend) takes no option 'allow_tf32'; its options: n_threads, force, "
                      "scratch_budget, fuse, autotune")
    assert out[1] == "[]"


def test_unknown_cuda_option_is_refused_before_the_device_is_touched():
    pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(ggpy.OptionError, match=r"backend 'cuda:1' \(CUDABackend\) takes no option 'tf32', 'threads'; "
                                               r"its options: allow_tf32, graphs, fuse, force, autotune"):
        make_backend("cuda:1", tf32=True, threads=4)


def test_unknown_backend():
    with pytest.raises(ggpy.UnsupportedOpError, match="unknown backend 'tpu'"):
        make_backend("tpu")


def test_cuda_options_reach_the_backend(cuda_backend):
    b = make_backend("cuda", 8, allow_tf32=True, graphs=False, fuse=False)     # n_threads: the CPU's, ignored here
    assert (b.allow_tf32, b.graphs, b.fuse) == (True, False, False)
