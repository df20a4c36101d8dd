"""Generated kernels: one CUDA C kernel per elementwise chain of the fusion pass (fusion.Chain), run by the "chain"
Fused (CHAIN) of the elementwise entries and of cast; and the elementwise ops (BINARY, UNARY, with the op params
PARAMS) whose math, ops.cuh's functors op_<name>, they and the elementwise family's kernels apply.

The chain's value stays in a register from its first node to its last: each unary node applies its functor, each
binary node combines it with its other operand (broadcast as ggml's b), each node rounds it to its own type (so the
result is the unfused graph's), and only the last node's memory is written. Operands that are contiguous with the
result's shape are read at the flat index, row vectors (biases) at the index modulo ne[0], the others through their
strides (the coordinates modulo their ne); index math in 32 bits where the result has fewer than 2^31 elements. The
kernels of a plan are one NVRTC program (sources.chain_program: they include common.cuh, ops.cuh and
generated.cuh), compiled with the plan's .cu files and cached on disk by source hash like them (compiler.py).
"""
from __future__ import annotations

import ctypes
import hashlib

from ....optable import OPS
from ...kernel import Fused
from .common import BLOCK, C_TYPES, FLOATS, MAX_BLOCKS, extent, tensor_ptr

BINARY = tuple(name for name, op in OPS.items() if op.binary)        # ops.cuh's op_<name>::f(x, y)
UNARY = tuple(name for name, op in OPS.items() if op.family == "elementwise" and name not in BINARY)   # f(x, p0, p1)
PARAMS = {"scale": ("s", "b"), "clamp": ("min", "max"), "leaky_relu": ("slope",)}
MAX_OPERANDS, MAX_PARAMS = 8, 8


class EwArgs(ctypes.Structure):
    """The C `struct EwArgs` (kernels/generated.cuh)."""
    _fields_ = [("dst", ctypes.c_void_p), ("n", ctypes.c_int64), ("ne", ctypes.c_int64 * 4),
                ("src", ctypes.c_void_p * MAX_OPERANDS), ("sne", (ctypes.c_int64 * 4) * MAX_OPERANDS),
                ("snb", (ctypes.c_int64 * 4) * MAX_OPERANDS), ("p", ctypes.c_float * MAX_PARAMS)]


def operands(chain) -> list:
    """The tensors the kernel reads: the first node's sources, then each later node's second source."""
    first = chain.head
    return [s for s in first.src if s is not None] + [n.src[1] for n in chain.nodes[1:] if len(n.src) > 1]


def params(chain) -> list:
    """The float parameters of the nodes (scale, clamp, leaky_relu), in order."""
    return [float(n.op_params[k]) for n in chain.nodes for k in PARAMS.get(n.op, ())]


def refusal(chain) -> str | None:
    """Why the generator cannot take the chain (None when it can)."""
    srcs = operands(chain)
    if any(t.type not in FLOATS for t in srcs + chain.nodes) or not chain.last.is_contiguous():
        return "generated kernels take float tensors and write a contiguous result"
    if len(srcs) > MAX_OPERANDS or len(params(chain)) > MAX_PARAMS:
        return f"generated kernels take at most {MAX_OPERANDS} operands and {MAX_PARAMS} parameters"
    return None


def _flat(t, last) -> bool:
    return t.ne == last.ne and t.is_contiguous()


def _row(t, last) -> bool:
    """A contiguous vector over ne[0] broadcast over every row (a bias)."""
    return t.ne == (last.ne[0], 1, 1, 1) and t.is_contiguous()


def _load(j: int, t, last, index: str) -> str:
    c = C_TYPES[t.type]
    if _flat(t, last):
        return f"to_f(((const {c}*)a.src[{j}])[i])"
    if _row(t, last):
        return f"to_f(((const {c}*)a.src[{j}])[i % ({index})a.ne[0]])"
    off = " + ".join(f"(c[{k}] % ({index})a.sne[{j}][{k}]) * a.snb[{j}][{k}]" for k in range(4))
    return f"to_f(*(const {c}*)(a.src[{j}] + {off}))"


def source(chain) -> tuple[str, str]:
    """(kernel name, CUDA C of the chain's kernel); the name is a hash of the code."""
    last, srcs = chain.last, operands(chain)
    index = "unsigned" if last.nelements < 1 << 31 else "i64"         # 32-bit index math where it fits
    loads = [_load(j, t, last, index) for j, t in enumerate(srcs)]
    lines, j, k = [f"float x = {loads[0]};"], 1, 0
    for n in chain.nodes:
        if n.op in BINARY:
            lines.append(f"x = op_{n.op}::f(x, {loads[j]});")
            j += 1
        elif n.op in UNARY:
            p = [f"a.p[{k + i}]" for i in range(len(PARAMS.get(n.op, ())))] + ["0.f", "0.f"]
            k += len(PARAMS.get(n.op, ()))
            lines.append(f"x = op_{n.op}::f(x, {p[0]}, {p[1]});")
        if n.type.size < 4:
            lines.append(f"x = to_f(from_f<{C_TYPES[n.type]}>(x));")      # the node's own rounding
    strided = not all(_flat(t, last) or _row(t, last) for t in srcs)
    unravel = f"{index} c[4]; unravel(i, a.ne, c);\n        " if strided else ""
    body = "\n        ".join(lines)
    code = (f"(const EwArgs a) {{\n    grid_dependency();\n    for ({index} i = blockIdx.x * blockDim.x + threadIdx.x; i < ({index})a.n; "
            f"i += gridDim.x * blockDim.x) {{\n        {unravel}{body}\n"
            f"        (({C_TYPES[last.type]}*)a.dst)[i] = from_f<{C_TYPES[last.type]}>(x);\n    }}\n}}\n")
    name = "ew_" + hashlib.sha1(code.encode()).hexdigest()[:16]
    return name, f'extern "C" __global__ void {name}{code}'


def args(chain, ptr) -> EwArgs:
    """The kernel's arguments; ptr(t) is a tensor's device address."""
    last, srcs = chain.last, operands(chain)
    a = EwArgs(dst=ptr(last), n=last.nelements)
    a.ne = (ctypes.c_int64 * 4)(*last.ne)
    for j, t in enumerate(srcs):
        a.src[j] = ptr(t)
        a.sne[j] = (ctypes.c_int64 * 4)(*t.ne)
        a.snb[j] = (ctypes.c_int64 * 4)(*t.nb)
    for i, v in enumerate(params(chain)):
        a.p[i] = v
    return a


def launch_config(chain) -> tuple:
    return min(MAX_BLOCKS, -(-chain.last.nelements // BLOCK)), BLOCK


def run(backend, chain) -> list | None:
    """The chain's generated kernel (compiled with the plan's others, backend.chain_kernel) where every operand is on
    this GPU and the result's memory is clear of the operands, or exactly one read at the same index (in place)."""
    srcs = operands(chain)
    if not backend.on_device(*srcs, chain.last):
        return None
    lo, hi = extent(chain.last)
    if not all(hi <= a or b <= lo or ((a, b) == (lo, hi) and t.ne == chain.last.ne and t.is_contiguous()
                                      and t.type == chain.last.type) for t in srcs for a, b in [extent(t)]):
        return None
    module, name = backend.chain_kernel(chain)
    launch = backend.launch_struct(chain.head, name, *launch_config(chain), args(chain, tensor_ptr), module)
    launch.name = chain.name()
    return [launch]


CHAIN = Fused(run, accepts=lambda chain: refusal(chain) is None)
