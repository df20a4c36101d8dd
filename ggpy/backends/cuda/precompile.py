"""The NVRTC cache filled ahead of time, on any machine with NVRTC (no GPU needed): every kernels/*.cu source for
the given architectures, so that the first CUDA run on the GPU machine loads cubins instead of compiling them (a
container image built once; a lent GPU whose time counts). The cache key holds the NVRTC version (compiler.py):
fill it with the NVRTC the GPU machine will run (`--nvrtc` prints this machine's), then copy the folder there and
point GGPY_CUDA_CACHE at it.

    python -m ggpy.backends.cuda.precompile [--arch sm_90 ...] [--cache DIR] [--jobs N] [--only STEM ...] [--nvrtc]
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from . import compiler
from .sources import files

ARCH = re.compile(r"(sm|compute)_\d{2,3}a?")


def precompile(archs: list, only: list | None = None, jobs: int | None = None) -> dict:
    """Compile (or find in the cache) the kernels/*.cu sources named by `only` (file stems; default all) for each
    architecture of `archs` ('sm_90': cubins, 'compute_90': PTX); {arch: (sources compiled, sources found cached)}."""
    bad = [a for a in archs if not ARCH.fullmatch(a)]
    if bad:
        raise ValueError(f"architecture(s) {bad}: expected sm_XY or compute_XY (e.g. sm_90 for H100/H200, sm_80 A100)")
    sources = files()
    unknown = sorted(set(only or ()) - set(sources))
    if unknown:
        raise ValueError(f"no kernels/*.cu named {unknown}; the sources are {sorted(sources)}")
    chosen = [sources[name] for name in (only or sources)]
    done = {}
    for arch in archs:
        before = dict(compiler.STATS)
        compiler.compile_many(chosen, arch, jobs)
        done[arch] = tuple(compiler.STATS[k] - before[k] for k in ("compiles", "hits"))
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ggpy.backends.cuda.precompile", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", nargs="+", default=["sm_90"], help="target architectures (default sm_90: H100, H200)")
    p.add_argument("--cache", help="the cache folder (default: GGPY_CUDA_CACHE, else ~/.cache/ggpy/cuda)")
    p.add_argument("--jobs", type=int, help="compiles at once (default: one per core)")
    p.add_argument("--only", nargs="+", metavar="STEM", help="only these kernels/*.cu (file stems, e.g. quant_q4_k)")
    p.add_argument("--nvrtc", action="store_true", help="print this machine's NVRTC version (part of the key), then stop")
    opts = p.parse_args(argv)
    if opts.jobs is not None and opts.jobs < 1:
        p.error(f"--jobs {opts.jobs}: expected at least 1 compile at once")
    version = ".".join(map(str, compiler.nvrtc_version()))
    if opts.nvrtc:
        print(f"NVRTC {version}")
        return 0
    if opts.cache:
        os.environ["GGPY_CUDA_CACHE"] = opts.cache
    try:
        done = precompile(opts.arch, opts.only, opts.jobs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for arch, (compiled, cached) in done.items():
        print(f"{arch}: {compiled} compiled, {cached} already cached (NVRTC {version}) in {compiler.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
