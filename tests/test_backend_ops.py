"""Every op case of ggpy.test_backend_ops on the CPU backend, against its float64 numpy reference."""
import os
import zlib

import pytest

import ggpy
from ggpy.test_backend_ops import all_cases, run_case

CASES = [c for c in all_cases() if "perf" not in c.tags]


@pytest.fixture(scope="module")
def backend():
    return ggpy.CPUBackend(n_threads=2)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op(case, backend):
    seed = zlib.crc32(case.id.encode()) ^ int(os.environ.get("GGPY_TEST_SEED", "0"))
    result = run_case(case, backend, seed=seed)
    assert result.ok, f"{case.id}: {result.message}"
