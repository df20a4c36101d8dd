"""A transformer's feed-forward as one kernel: the fusion pass's mlp pattern (LayerNorm -> fc1 + bias -> activation
-> fc2 + bias -> + residual; MobileSAM's TinyViT blocks) runs as `mlp_tc` (mlp.cu) at the norm's turn, F16 / BF16 on
tensor cores, instead of a LayerNorm pass, two cuBLASLt GEMMs and an activation pass whose hidden activations (4x
the width) go through HBM twice.

x: rows of C (ne[0]) contiguous; W1 ne = (C, H), W2 ne = (H, C) contiguous, H a multiple of 64; the norm's weight
and bias, b1 and b2 contiguous vectors; every tensor of one type T (F16 or BF16), the products F32 cast to T (the
activations of a half-precision plan); the residual r of x's shape and layout; the result in the residual add's
memory, clear of everything but x and r (or exactly over either). The entry of norm's kernel table
(kernels/norm.py) runs it as its Fused "mlp"; F32 plans keep the unfused kernels.
"""
from __future__ import annotations

import ctypes

from ....types import BF16, F16
from .common import SUFFIX, apart, clear_or_over, extent, tensor_ptr
from .epilogue import act_id

WIDTHS = (64, 96, 128, 160, 192, 256, 320)      # C of the compiled kernels (mlp.cu's instantiations)
TYPES = (F16, BF16)
ROWS = 64           # rows of x a block takes (MLP_ROWS)
CHUNK = 64          # hidden columns a block computes at a time (MLP_CHUNK)
THREADS = 256
MIN_WAVES = 2       # blocks an SM below which the unfused kernels run (one block an SM fits: 146-244 registers)


class MlpArgs(ctypes.Structure):
    """mlp.cu's struct MlpArgs."""
    _fields_ = [(name, ctypes.c_void_p) for name in ("x", "gamma", "beta", "w1", "b1", "w2", "b2", "r", "dst")] + [
        ("rows", ctypes.c_int), ("hidden", ctypes.c_int), ("act", ctypes.c_int), ("eps", ctypes.c_float)]


def shared_bytes(c: int) -> int:
    """Dynamic shared memory of a block for rows of c (MlpSmem<C>): x's rows, W1's and W2's chunks, the hidden
    chunk, in halves padded by 8."""
    xp, hp = c + 8, CHUNK + 8
    return 2 * (ROWS * xp + CHUNK * xp + c * hp + ROWS * hp)


def _vector(t, n: int, type_) -> bool:
    return t.type == type_ and t.nelements == n and t.is_contiguous()


def accepts(f) -> bool:
    """x, the weights, the biases, the residual and every node of the pattern of one type T in TYPES (the products
    F32, each cast to T); C in WIDTHS, H a multiple of CHUNK; everything contiguous."""
    x, w1, w2 = f.x, f.w1, f.w2
    t, c = x.type, x.ne[0]
    if t not in TYPES or c not in WIDTHS or not x.is_contiguous() or x.nelements // c >= 1 << 31:
        return False
    hidden = w1.ne[1]
    if w1.type != t or w2.type != t or w1.ne[:2] != (c, hidden) or w2.ne[:2] != (hidden, c) or hidden % CHUNK:
        return False
    if w1.nelements != c * hidden or w2.nelements != c * hidden or not (w1.is_contiguous() and w2.is_contiguous()):
        return False
    if any(e.cast_node is None or e.head.type.size != 4 for e in (f.up, f.down)):
        return False
    if not all(n.type == t for n in f.computed if n.op != "mul_mat"):
        return False
    vectors = ((f.ln.scale, c), (f.ln.bias, c), (f.up.bias, hidden), (f.down.bias, c))
    r, out = f.down.residual, f.last
    return (all(_vector(v, n, t) for v, n in vectors) and r.type == t and r.ne == out.ne == x.ne
            and r.is_contiguous() and out.is_contiguous())


def run(backend, f) -> list | None:
    """The mlp_tc launch where it fills the GPU (at least MIN_WAVES blocks an SM: fewer rows run the unfused
    kernels, which spread each product over more blocks), every operand is on this GPU, x, the weights, r and the
    result 16-byte aligned, and the result clear of the weights and biases and clear of, or exactly over, x and r (each
    row read first)."""
    r, out = f.down.residual, f.last
    if f.x.nelements // f.x.ne[0] < MIN_WAVES * ROWS * backend.device.sms:
        return None
    weights = [f.ln.scale, f.ln.bias, f.w1, f.up.bias, f.w2, f.down.bias]
    if not backend.on_device(f.x, r, out, *weights) or any(tensor_ptr(t) % 16 for t in (f.x, f.w1, f.w2, r, out)):
        return None
    if not (apart(out, [extent(w) for w in weights]) and clear_or_over(out, (f.x, r))):
        return None
    x, c = f.x, f.x.ne[0]
    rows = x.nelements // c
    a = MlpArgs(x=tensor_ptr(x), gamma=tensor_ptr(f.ln.scale), beta=tensor_ptr(f.ln.bias), w1=tensor_ptr(f.w1),
                b1=tensor_ptr(f.up.bias), w2=tensor_ptr(f.w2), b2=tensor_ptr(f.down.bias), r=tensor_ptr(r),
                dst=tensor_ptr(out), rows=rows, hidden=f.w1.ne[1], act=act_id(f.up), eps=f.head.op_params["eps"])
    launch = backend.launch_struct(f.head, kernel_name(c, x.type), (-(-rows // ROWS),), (THREADS,), a,
                                   shared=shared_bytes(c))
    return [launch]


def kernel_name(c: int, t) -> str:
    return f"mlp_tc_c{c}_{SUFFIX[t]}"
