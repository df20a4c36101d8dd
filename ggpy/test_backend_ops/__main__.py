"""CLI: python -m ggpy.test_backend_ops [-o OP] [-b BACKEND] [--mode test|perf] [-t THREADS]."""
from __future__ import annotations

import argparse
import sys

from ..backends import make_backend
from ..errors import GGPYError
from .cases import all_cases
from .harness import perf_case, refusal, run_case


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ggpy.test_backend_ops",
                                     description="Check (or time) every op against a float64 numpy reference.")
    parser.add_argument("-o", "--op", action="append", help="only cases of this op (repeatable)")
    parser.add_argument("-b", "--backend", default="cpu", help="backend to test (default: cpu)")
    parser.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--mode", choices=("test", "perf"), default="test")
    parser.add_argument("-p", "--params", default=None, help="only cases whose parameters contain this text")
    args = parser.parse_args(argv)

    try:
        backend = make_backend(args.backend, n_threads=args.threads)
    except GGPYError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cases = [c for c in all_cases() if (not args.op or c.op in args.op) and (not args.params or args.params in c.params)]
    if args.mode == "test":
        cases = [c for c in cases if "perf" not in c.tags]
    if not cases:
        print(f"no cases match op={args.op} params={args.params!r}", file=sys.stderr)
        return 2
    failed = skipped = 0
    for case in cases:
        reason = refusal(case, backend)
        if reason is not None:
            skipped += 1
            print(f"  {case.id:<70} not supported ({reason})", flush=True)
            continue
        try:
            if args.mode == "test":
                r = run_case(case, backend)
                status = "OK" if r.ok else "FAIL"
                print(f"  {case.id:<70} {status}  nmse={r.nmse:.2e} {r.message}", flush=True)
            else:
                r = perf_case(case, backend)
                print(f"  {case.id:<70} {r.us_per_run:>12.1f} us/run  {r.rate}", flush=True)
        except Exception as e:  # report and go on: one broken case must not hide the others
            r = None
            print(f"  {case.id:<70} FAIL  {type(e).__name__}: {e}", flush=True)
        if r is None or not r.ok:
            failed += 1
    print(f"{len(cases) - failed - skipped}/{len(cases) - skipped} cases passed on {args.backend}"
          + (f" ({skipped} not supported)" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
