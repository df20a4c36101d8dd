"""The op harness catches what it claims: deliberately broken kernels of each kind fail their cases (an output
region never written, an accumulator never zeroed, a scratch block overrun by one byte, a fused GEMM epilogue
applied to the wrong rows, a kernel that scribbles on its source), while the real kernels pass the same cases."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ggpy
from ggpy.backends.cpu.registry import KERNELS, CPUKernel
from ggpy.test_backend_ops import all_cases, run_case
from ggpy.test_backend_ops.cases.matmul import epilogue_cases


def _case(op: str, params: str):
    return next(c for c in all_cases() if c.op == op and c.params == params)


def _broken(monkeypatch, op: str, bind, temp_size=None):
    """Run `op` on the CPU with `bind` (a BoundNode -> call) instead of its kernel."""
    monkeypatch.setitem(KERNELS, op, CPUKernel(ops=(op,), bind=bind, temp_size=temp_size))


@pytest.fixture
def cpu():
    return ggpy.CPUBackend(n_threads=2)


CONT = ("cont", "f32,permuted")
SUM_ROWS = ("sum_rows", "f32,ne=(33, 5, 4, 3)")


def test_the_real_kernels_pass(cpu):
    for op, params in (CONT, SUM_ROWS):
        assert run_case(_case(op, params), cpu).ok
    assert all(run_case(c, cpu).ok for c in epilogue_cases()[:4])


def test_unwritten_output_region(cpu, monkeypatch):
    def bind(b):        # the last element of every row is never written
        return lambda: b.dst.__setitem__((..., slice(None, -1)), b.srcs[0][..., :-1])
    _broken(monkeypatch, "cont", bind)
    result = run_case(_case(*CONT), cpu)
    assert not result.ok and "inf/nan" in result.message


def test_accumulator_not_zeroed(cpu, monkeypatch):
    def bind(b):        # sums into whatever the output's memory held
        return lambda: b.dst.__iadd__(b.srcs[0].sum(axis=-1, keepdims=True, dtype=np.float32))
    _broken(monkeypatch, "sum_rows", bind)
    result = run_case(_case(*SUM_ROWS), cpu)
    assert not result.ok


def test_scratch_overrun_by_one_byte(cpu, monkeypatch):
    def bind(b):        # fills its 64 bytes of scratch and one more
        def run():
            np.lib.stride_tricks.as_strided(b.temp, (65,), (1,))[:] = 0
            b.dst[...] = b.srcs[0]
        return run
    _broken(monkeypatch, "cont", bind, temp_size=lambda node, impl, backend: 64)
    with pytest.raises(ggpy.AllocationError, match="guard bytes after the temp block"):
        run_case(_case(*CONT), cpu)


def test_fused_epilogue_on_the_wrong_rows(cpu, monkeypatch):
    entry = KERNELS["mul_mat"]
    real = entry.fuses["epilogue"]

    def shifted(b, fusion):     # the bias and activation land one row off
        run = real.run(b, fusion)

        def wrong():
            run()
            b.dst[...] = np.roll(b.dst, 1, axis=-2)
        return wrong
    monkeypatch.setitem(KERNELS, "mul_mat", dataclasses.replace(entry, fuses={**entry.fuses,
                                                                             "epilogue": dataclasses.replace(real, run=shifted)}))
    case = epilogue_cases()[2]
    assert case.reference is not None and case.kernel.startswith("gemm")
    assert not run_case(case, cpu).ok


def test_kernel_writing_into_its_source(cpu, monkeypatch):
    def bind(b):
        def run():
            b.dst[...] = b.srcs[0]
            b.srcs[0][..., 0] = 0       # scribbles on what it read
        return run
    _broken(monkeypatch, "cont", bind)
    result = run_case(_case(*CONT), cpu)
    assert not result.ok and "overwritten" in result.message


def test_poison_is_nan_in_every_float_type():
    assert np.isnan(np.frombuffer(bytes([ggpy.alloc.graph_allocator.POISON_BYTE]) * 4, np.float32)[0])
    assert np.isnan(np.frombuffer(bytes([ggpy.alloc.graph_allocator.POISON_BYTE]) * 2, np.float16)[0])
