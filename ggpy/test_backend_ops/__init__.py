"""test-backend-ops: every op on every backend against float64 numpy references (`python -m ggpy.test_backend_ops`)."""
from .cases import all_cases
from .harness import CaseResult, OpCase, nmse, perf_case, refusal, run_case

__all__ = ["all_cases", "OpCase", "CaseResult", "run_case", "perf_case", "nmse", "refusal"]
