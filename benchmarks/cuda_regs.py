"""Registers and spills of every kernel of a CUDA source, from ptxas through NVRTC (no GPU needed).

    python benchmarks/cuda_regs.py STEM [FILTER]      # STEM: a kernels/*.cu file's stem (quant_q6_k, attention_fa_dec)

Prints, per kernel whose name contains FILTER, the registers a thread uses and ptxas's stack frame, spill-store and
spill-load bytes for sm_90: the first thing to check when a kernel's bandwidth falls short (a spilling kernel reads
and writes local memory in its loop).
"""
from __future__ import annotations

import re
import sys

from cuda.bindings import nvrtc

from ggpy.backends.cuda import sources
from ggpy.backends.cuda.compiler import KERNEL_DIR


def ptxas_log(stem: str, arch: str = "sm_90") -> str:
    src = sources.files()[stem]
    prog = nvrtc.nvrtcCreateProgram(src.text.encode(), src.name.encode(), 0, [], [])[1]
    opts = [f"--gpu-architecture={arch}", f"--include-path={KERNEL_DIR}", *src.options, "--ptxas-options=-v"]
    err = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
    log = b" " * nvrtc.nvrtcGetProgramLogSize(prog)[1]
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise SystemExit(log.decode(errors="replace")[-3000:])
    return log.decode(errors="replace")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit(__doc__)
    stem, want = args[0], args[1] if len(args) > 1 else ""
    kernel, spill = None, ("?", "?", "?")
    print("| kernel | registers | stack frame / spill stores / spill loads (bytes) |\n| --- | --- | --- |")
    for line in ptxas_log(stem).splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            kernel = m[1]
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            spill = m.groups()
        if (m := re.search(r"Used (\d+) registers", line)) and kernel and want in kernel:
            print(f"| {kernel} | {m[1]} | {' / '.join(spill)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
