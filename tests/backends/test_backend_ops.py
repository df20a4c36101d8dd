"""Every test-backend-ops case on every available backend (cpu always, cuda where a GPU is present) against its
float64 numpy reference, as ggml's test-backend-ops runs every case on every backend. A case whose nodes a
backend refuses is skipped with the backend's reason."""
import os
import zlib

import pytest

import ggpy
from ggpy.test_backend_ops import all_cases, refusal, run_case

CASES = [c for c in all_cases() if "perf" not in c.tags]


@pytest.fixture(scope="module")
def cpu_backend():
    return ggpy.CPUBackend(n_threads=2)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
def test_op(backend_name, case, request):
    backend = request.getfixturevalue(f"{backend_name}_backend")       # cuda_backend (conftest) skips without a GPU
    reason = refusal(case, backend)
    if reason is not None:
        pytest.skip(reason)
    seed = zlib.crc32(case.id.encode()) ^ int(os.environ.get("GGPY_TEST_SEED", "0"))
    result = run_case(case, backend, seed=seed)
    assert result.ok, f"{case.id} on {backend.name}: {result.message}"
