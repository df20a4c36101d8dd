"""mul_mat, three implementations: `cublaslt`, cuBLASLt GEMMs (cublas.py) run as Python-side steps; `mmv`,
quant.py's dot-product kernel for few columns of b, chosen where a is grouped or of another type than b; and `mmvq`,
quant.py's integer dot-product kernel on b's columns quantized to 8 bits, chosen for a quantized a times up to
quant.MMVQ_MAX_BATCH columns (beyond MMV_MAX_N its batch kernels: a server's batched decode; the weights are never
dequantized) (choose; CUDABackend(force={"mul_mat": ...}) and autotune cover all three; mmv is the exact one).
a.ne = (K, M, A2, A3), b.ne = (K, N, B2, B3), F32, F16 or BF16 each, a also quantized (a dequantized F16 copy in the
GEMM). Result F32 (M, N, B2, B3), or the
operands' type when both have it and a cast of the result is fused (the fusion pass's epilogue). Operands that cuBLASLt
cannot read in place are copied into the temp block.

ggml's result[n, m] = sum_k a[m, k] b[n, k] is, column-major, D (M x N) = op(A) op(B): a's K-contiguous rows
are a K x M matrix read transposed, b's a K x N matrix. Batches (plan_batches): one GEMM over all rows when a
is one matrix and b's rows are uniform; else dims 2 and 3 as one strided batch when their strides allow (a's
stride 0 when it is broadcast); else the dim with more matrices strided-batched and the other looped (a dim
where a repeats r > 1 times over several matrices is always looped). A fused bias add runs as cuBLASLt's BIAS
epilogue, a fused residual add as its C matrix (the fusion pass's epilogue pattern); the mul_mat entry also runs the
attention pattern, by kernels/attention.py's win_attn; the rms_norm entry (norm.py) runs the norm_mat_vec pattern by
norm_mat_vec_run here (the products of an RMSNorm in one launch, quant_norm.cu) and the norm_rope_kv pattern by
norm_rope_kv_run (those of q, k, v with the rope_kv after them: norm_mmvq_rope).
"""
from __future__ import annotations

import ctypes
from itertools import accumulate

from ....errors import UnsupportedOpError
from ....types import F32, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0
from ...kernel import Fused
from ..cublas import MISSING, WORKSPACE, Gemm
from ..gemm_plan import align_temp, contiguous, gemm_type, operand_layout
from ..registry import register
from . import attention, handoff, layout, quant, rope
from .common import FLOATS, SUFFIX, Args, apart, extent, pack_args, tensor_ptr

def refusal(node) -> str | None:
    a, b = node.src[:2]
    if (a.type not in FLOATS and not a.type.quantized) or b.type not in FLOATS:
        return f"mul_mat on CUDA takes F32, F16, BF16 or quantized a and a float b, not {a.type.name} x {b.type.name}"
    return None if MISSING is None or quant.mmv_preferred(node) or quant.mmvq_fits(node) else f"mul_mat on CUDA {MISSING}"


def choose(node, backend) -> str:
    return "mmvq" if quant.mmvq_fits(node) else "mmv" if quant.mmv_preferred(node) else "cublaslt"


def accepts(node, impl: str, backend) -> bool:
    if impl == "mmvq":
        return quant.mmvq_fits(node)
    return quant.mmv_fits(node) if impl == "mmv" else MISSING is None


def kernel_name(node, impl) -> str:
    a, b = node.src[:2]
    if impl == "mmvq":
        return f"mmvq_{'b_' if quant.mmvq_batch(node) else ''}{SUFFIX[a.type]}"
    return quant.mmv_name(node) if impl == "mmv" else f"cublaslt_{a.type.name.lower()}_{b.type.name.lower()}"


def conversions(node) -> list:
    """[(operand index, temp offset, contiguous layout)] of the operands copied before the GEMM; the temp block
    starts with the workspace."""
    out, offset, type_ = [], WORKSPACE, gemm_type(node)
    for i, t in enumerate(node.src[:2]):
        if operand_layout(t, type_) is None:
            c = contiguous(t, type_)
            out.append((i, offset, c))
            offset += align_temp(c.nbytes)
    return out


def temp_size(node, impl: str, backend) -> int:
    """The workspace plus the operand copies (none for the dot-product kernel, b's q8_1 columns for mmvq)."""
    if not accepts(node, impl, backend):
        raise UnsupportedOpError(f"cuda: mul_mat '{node.name}' (a {node.src[0].type.name} ne={node.src[0].ne}, b ne="
                                 f"{node.src[1].ne}) cannot run as {impl}: mmv takes at most {quant.MMV_MAX_N} columns "
                                 f"of b per matrix (K a multiple of 8), mmvq as many of a float b times a quantized a, "
                                 f"cublaslt needs cuBLASLt")
    if impl == "mmv":
        return 0
    if impl == "mmvq":
        return quant.mmvq_temp_size(node)
    return WORKSPACE + sum(align_temp(c.nbytes) for _, _, c in conversions(node))


def _rows_uniform(t, row_stride: int) -> bool:
    """Whether t's rows (dim 1) continue through dims 2 and 3 at one stride (one matrix of ne1*ne2*ne3 rows)."""
    expected = row_stride * t.ne[1]
    for k in (2, 3):
        if t.ne[k] > 1:
            if t.nb[k] != expected:
                return False
            expected *= t.ne[k]
    return True


def plan_batches(ta, tb, kb: bool, ldb: int, d, ldd: int):
    """How the (A2*A3 vs B2*B3) matrices of a mul_mat become cuBLASLt calls: (N per call, batch count, byte
    strides (A, B, D) between batched matrices, [(A, B, D) byte offsets of each call]).
    One GEMM over all rows when a is one matrix and b's and d's rows are uniform; else dims 2 and 3 merged into
    one strided batch when their strides allow; else the larger strided dim batched, the other looped."""
    es = ta.type.size
    N = tb.ne[1]
    B2, B3 = tb.ne[2:]
    if ta.ne[2] == ta.ne[3] == 1 and kb and _rows_uniform(tb, ldb * es) and _rows_uniform(d, ldd * d.type.size):
        return N * B2 * B3, 1, (0, 0, 0), [(0, 0, 0)]
    r = {k: tb.ne[k] // ta.ne[k] for k in (2, 3)}

    def stride(k):
        sa = ta.nb[k] if ta.ne[k] == tb.ne[k] else 0 if ta.ne[k] == 1 else None
        return None if sa is None else (sa, tb.nb[k], d.nb[k])
    dims = [k for k in (2, 3) if tb.ne[k] > 1]
    s = {k: stride(k) for k in dims}
    if len(dims) == 2 and s[2] is not None and s[3] is not None and all(s[3][j] == s[2][j] * B2 for j in range(3)):
        return N, B2 * B3, s[2], [(0, 0, 0)]
    strided = [k for k in dims if s[k] is not None]
    bdim = max(strided, key=lambda k: tb.ne[k]) if strided else None
    loop = [k for k in dims if k != bdim]
    offsets = [(0, 0, 0)]
    for k in loop:
        offsets = [(oa + (i // r[k]) * ta.nb[k], ob + i * tb.nb[k], od + i * d.nb[k])
                   for oa, ob, od in offsets for i in range(tb.ne[k])]
    if bdim is None:
        return N, 1, (0, 0, 0), offsets
    return N, tb.ne[bdim], s[bdim], offsets


def steps(backend, node, impl: str) -> list:
    if impl == "mmvq":
        return quant.mmvq_steps(backend, node, q8=handoff.quantized_b(backend, node))
    return quant.mmv_steps(backend, node) if impl == "mmv" else gemm_steps(backend, node)


def gemm_steps(backend, node, add=None, residual_node=None, residual=None) -> list:
    """The cublaslt steps of a mul_mat node: copies of operands cuBLASLt cannot read in place, then the GEMMs. With
    `add` (an add of a bias vector over ne[0] fused after the node, perhaps through a cast: the add's type is D's),
    D goes to add's memory with the bias added by cuBLASLt's BIAS epilogue; with `residual_node` too (an add of the contiguous `residual` after the
    bias add, add and node contiguous), D goes to residual_node's memory and C = residual with beta = 1."""
    temp = backend.temp_ptr(node)
    gtype = gemm_type(node)
    ops = [[tensor_ptr(t), t, operand_layout(t, gtype)] for t in node.src[:2]]
    steps = []
    for i, offset, c in conversions(node):
        ptr, t = ops[i][:2]
        ints = layout.dense_copy(temp + offset, c, ptr, t)
        steps.append(backend.launch(node, f"copy_{SUFFIX[t.type]}_{SUFFIX[gtype]}", temp + offset, c, [(ptr, t)],
                                    config=layout.copy_config(c, ints), ints=ints))
        ops[i] = [temp + offset, c, (True, c.ne[0])]
    (pa, ta, _), (pb, tb, (kb, ldb)) = ops
    dst = node if add is None else add
    pd = tensor_ptr(dst if residual_node is None else residual_node)
    ldd = dst.nb[1] // dst.type.size if dst.ne[1] > 1 else dst.ne[0]
    N, batch, strides, offsets = plan_batches(ta, tb, kb, ldb, dst, ldd)
    ptrs = [(pa + oa, pb + ob, pd + od) for oa, ob, od in offsets]
    c_ptrs = None if residual_node is None else [tensor_ptr(residual) + od for _, _, od in offsets]
    tf32 = gtype == F32 and backend.allow_tf32
    name = (kernel_name(node, "cublaslt") + ("_tf32" if tf32 else "") + (f"+{dst.type.name}" if dst.type != F32 else "")
            + ("+bias" if add is not None else "")
            + ("+residual" if residual_node is not None else ""))
    bias = tensor_ptr(add.src[1]) if add is not None else None
    steps.append(Gemm(backend, node, name, ops[0], ops[1], N, ptrs, batch, strides, tf32, temp, bias, dst,
                      c_ptrs))
    return steps


def epilogue_accepts(f) -> bool:
    """The GEMM writes D in the add's type (F32, or through a fused cast the operands' type), add and product
    contiguous of one shape."""
    if f.head.nelements == 0 or (f.cast_node is not None and gemm_type(f.head) != f.add_node.type):
        return False
    return f.add_node.ne == f.head.ne and f.add_node.is_contiguous() and f.head.is_contiguous()


def epilogue_run(backend, f) -> list | None:
    """The GEMM with the bias as cuBLASLt's BIAS epilogue (and the residual as C, when the fusion has one) writing
    the last node's memory: everything on this GPU, the bias 16-byte aligned, D clear of the operands and the
    scratch (a plan made without fused_groups), C clear of D or exactly D (in place)."""
    node, r = f.head, f.residual
    if not backend.on_device(node, f.last, f.bias, *node.src[:2], *([r] if r is not None else [])):
        return None
    if getattr(node, "temp", None) is None or tensor_ptr(f.bias) % 16:
        return None
    tp = backend.temp_ptr(node)
    others = [extent(s) for s in node.src[:2]] + [(tp, tp + backend.temp_size(node))]
    if r is not None and extent(r) != extent(f.last):
        others.append(extent(r))
    if not apart(f.last, others):
        return None
    return gemm_steps(backend, node, f.add_node, f.residual_node, r)


def _mmvq(node, impl) -> bool:
    return impl == "mmvq"


def _temp_range(backend, node) -> list:
    """[the node's temp block as an address range], or [] when its kernel needs none."""
    size = backend.temp_size(node)
    return [(backend.temp_ptr(node), backend.temp_ptr(node) + size)] if size else []


def glu_accepts(f) -> bool:
    """silu(gate) * up of two products the glu kernel takes: weights of one type and layout, F32 results."""
    g, u = f.w_gate, f.w_up
    return (f.act == "silu" and quant.mmvq_fits(f.gate) and g.type == u.type and g.ne == u.ne and g.nb == u.nb
            and f.mul.type == F32 and f.mul.ne == f.gate.ne)


def glu_run(backend, f) -> list | None:
    """mmvq[_s]_glu writing the mul's memory, where everything is on this GPU and the mul clear of the weights and the
    head's temp (the q8_1 columns of x, which both products read)."""
    if not backend.on_device(f.mul, f.x, f.w_gate, f.w_up) or not apart(
            f.mul, [extent(f.w_gate), extent(f.w_up)] + _temp_range(backend, f.head)):
        return None
    steps = quant.mmvq_steps(backend, f.head, dst=f.mul, gate=f.w_gate, up=f.w_up)
    if steps is not None:
        steps[-1].name = f.name(kernel_name(f.head, "mmvq"))
    return steps


NMV_TYPES = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)     # quant_norm.cu's weight type ids
NMV_MAX = 4


class NormVecArgs(ctypes.Structure):
    """quant_norm.cu's NormVecArgs: x, the norm's weight and eps in Args, then each product's weight, result, row stride,
    last row (counting the products before it) and weight type."""
    _fields_ = [("a", Args), ("mat", ctypes.c_void_p * NMV_MAX), ("out", ctypes.c_void_p * NMV_MAX),
                ("nb1", ctypes.c_int64 * NMV_MAX), ("end", ctypes.c_int * NMV_MAX), ("type", ctypes.c_int * NMV_MAX)]


def norm_mat_vec_accepts(f) -> bool:
    """F32 x of one matrix, norm, mul and weight; at most NMV_MAX products that mmvq runs, of 2-D weights of NMV_TYPES,
    contiguous weights and results; a glu that glu_accepts."""
    x = f.head.src[0]
    return (all(t.type == F32 for t in (x, f.head, f.mul, f.weight)) and f.weight.is_contiguous()
            and x.ne[2] == x.ne[3] == 1 and len(f.products) <= NMV_MAX and (f.glu is None or glu_accepts(f.glu))
            and all(quant.mmvq_fits(m) and m.src[0].type in NMV_TYPES and m.src[0].ne[2:] == (1, 1)
                    and m.src[0].is_contiguous() and m.is_contiguous() for m in f.products))


def norm_mat_vec_run(backend, f) -> list | None:
    """norm_mmvq[_glu] (one launch; each block normalises and quantizes x in shared memory) where every product is
    small (quant.mmvq_shared), else rms_norm_mul_q8_1[_b] into h's memory and each product's mmvq[_b][_glu] from it;
    where every product runs as mmvq (not forced to another implementation), everything is on this GPU, the weights'
    rows aligned for the loads and the results and h clear of x, the weights and each other."""
    x, h, glu = f.head.src[0], f.mul, f.glu
    if any(backend.impl_for(m) != "mmvq" for m in f.products):     # force={"mul_mat": "mmv" | "cublaslt"}: theirs
        return None
    mats = [glu.w_gate, glu.w_up] if glu else [m.src[0] for m in f.products]
    written = f.outputs + [h]
    if not backend.on_device(x, f.weight, *mats, *written) or not all(map(quant.mmvq_aligned, mats)) or not all(
            apart(t, [extent(s) for s in [x, f.weight, *mats, *written] if s is not t]) for t in written):
        return None
    name = f.name(f"rms_norm_{SUFFIX[F32]}")
    if not all(map(quant.mmvq_shared, f.products)):
        steps = [_norm_q8_1(backend, f, mats)]
        for m in ([glu.head] if glu else f.products):
            dst = glu.mul if glu else m
            steps += quant.mmvq_steps(backend, m, dst, gate=glu and glu.w_gate, up=glu and glu.w_up, q8=tensor_ptr(h))
        steps[0].name = name
        return steps
    rows = list(accumulate(w.ne[1] for w in mats[:1 if glu else None]))
    p = _norm_vec_args(f, mats, [tensor_ptr(t) for t in f.outputs], rows)
    launch = backend.launch_struct(f.head, f"norm_mmvq{'_glu' if glu else ''}", -(-rows[-1] // quant.MMVQ_SHARED_WARPS),
                                   32 * quant.MMVQ_SHARED_WARPS, p)
    launch.shared, launch.name = quant.mmvq_shared(f.products[0]), name
    return [launch]


def _norm_q8_1(backend, f, mats):
    """rms_norm_mul_q8_1[_b]: x normalised, scaled and quantized to q8_1 into h's memory (a 32-block a warp, x's norm
    summed by each block)."""
    x = f.head.src[0]
    kernel = "rms_norm_mul_q8_1_b" if quant.mmvq_batch(f.products[0]) else "rms_norm_mul_q8_1"
    return backend.launch_struct(f.head, kernel, -(-x.ne[0] * x.ne[1] // (32 * 8)), 256, _norm_args(f, mats))


def _norm_args(f, mats) -> Args:
    """The Args of a norm_mat_vec's kernels: h (dst), x and the norm's weight (src0, src1), eps; iop MMVQ_WEIGHTS where
    the norm's weight and every weight of `mats` are model weights."""
    x, h = f.head.src[0], f.mul
    return pack_args(tensor_ptr(h), h, [(tensor_ptr(x), x), (tensor_ptr(f.weight), f.weight)], (f.head.op_params["eps"],),
                     quant.MMVQ_WEIGHTS if all(map(quant.model_weight, [f.weight, *mats])) else 0)


def _norm_vec_args(f, mats, outs, rows) -> NormVecArgs:
    """The NormVecArgs of weights `mats` into the addresses `outs`, the products' `rows` counted cumulatively."""
    pad = lambda v: v + v[-1:] * (NMV_MAX - len(v))       # noqa: E731
    return NormVecArgs(_norm_args(f, mats), (ctypes.c_void_p * NMV_MAX)(*pad([tensor_ptr(w) for w in mats])),
                       (ctypes.c_void_p * NMV_MAX)(*pad(outs)), (ctypes.c_int64 * NMV_MAX)(*pad([w.nb[1] for w in mats])),
                       (ctypes.c_int * NMV_MAX)(*pad(rows)), (ctypes.c_int * NMV_MAX)(*pad([NMV_TYPES.index(w.type) for w in mats])))


class NormRopeArgs(ctypes.Structure):
    """quant_norm.cu's NormRopeArgs: the NormVecArgs of q, k, v into the q rope's memory and the caches, the q rope's
    Args, the caches' row indices (address, byte stride), each output's row stride, row count and type (FLOATS)."""
    _fields_ = [("v", NormVecArgs), ("rope", Args), ("idx", ctypes.c_void_p), ("idx_nb", ctypes.c_int64),
                ("onb", ctypes.c_int64 * 3), ("rows", ctypes.c_int64 * 3), ("type", ctypes.c_int * 3)]


def norm_rope_kv_accepts(f) -> bool:
    """What norm_mat_vec_accepts and rope_kv_accepts take, with at most MMV_MAX_N columns (no batch kernels), the q rope
    contiguous, q and k heads of one even size, v's rows even, the caches' rows contiguous."""
    mv, kv = f.mv, f.kv
    q, caches = kv.head, (kv.k.last, kv.v_store)
    return (norm_mat_vec_accepts(mv) and rope.rope_kv_accepts(kv) and not quant.mmvq_batch(mv.products[0])
            and q.is_contiguous() and q.ne[0] == kv.k.head.ne[0] and q.ne[0] % 2 == kv.v_store.src[0].ne[0] % 2 == 0
            and all(c.nb[0] == c.type.size for c in caches))


def norm_rope_kv_run(backend, f) -> list | None:
    """norm_mmvq_rope (one launch; a warp a pair of rows) writing the q rope's memory and the caches' rows where every
    product is small (quant.mmvq_shared), else rms_norm_mul_q8_1 into h's memory and mmvq_rope from it (two launches
    where norm_mat_vec takes four); where the products run as mmvq, rope.kv_args allows rope_kv's launch, x, the norm's
    weight and the weights lie on this GPU clear of what it writes, the weights' rows aligned."""
    mv, kv = f.mv, f.kv
    outs, mats = (kv.head, kv.k.last, kv.v_store), [m.src[0] for m in mv.products]
    small = all(map(quant.mmvq_shared, mv.products))
    reads, args = [mv.head.src[0], mv.weight, *mats], rope.kv_args(backend, kv)
    written = list(outs) + ([] if small else [mv.mul])
    if (any(backend.impl_for(m) != "mmvq" for m in mv.products) or args is None or not backend.on_device(*reads, *written)
            or not all(map(quant.mmvq_aligned, mats)) or not all(apart(t, [extent(s) for s in reads + written if s is not t])
                                                                 for t in written)):
        return None
    q, kc, vc = outs
    rows = list(accumulate(w.ne[1] for w in mats))
    p = NormRopeArgs(_norm_vec_args(mv, mats, [tensor_ptr(t) for t in outs], rows), args.q, args.k.idx, args.k.idx_nb,
                     (ctypes.c_int64 * 3)(q.nb[2], kc.nb[1], vc.nb[1]), (ctypes.c_int64 * 3)(q.ne[2], kc.ne[1], vc.ne[1]),
                     (ctypes.c_int * 3)(*[FLOATS.index(t.type) for t in outs]))
    name = f.name(f"rms_norm_{SUFFIX[F32]}")
    if not small:
        p.v.a.src0 = tensor_ptr(mv.mul)         # the q8_1 columns of rms_norm_mul_q8_1
        norm, warps = _norm_q8_1(backend, mv, mats), quant.MMV_WARPS
        launch = backend.launch_struct(mv.head, "mmvq_rope", -(-rows[-1] // (2 * warps)), 32 * warps, p)
        norm.name = name
        return [norm, launch]
    warps = quant.MMVQ_SHARED_WARPS             # norm_mmvq's blocks: x's norm summed in its order (the same bits)
    launch = backend.launch_struct(mv.head, "norm_mmvq_rope", -(-rows[-1] // (2 * warps)), 32 * warps, p)
    launch.shared, launch.name = quant.mmvq_shared(mv.products[0]), name
    return [launch]


def mul_mat_add_accepts(f) -> bool:
    """A product mmvq runs plus a contiguous F32 residual: the add's elements are the product's in order."""
    r, m = f.residual, f.head
    return (quant.mmvq_fits(m) and all(t.type == F32 and t.is_contiguous() for t in (m, r, f.add))
            and r.nelements == m.nelements == f.add.nelements)


def mul_mat_add_run(backend, f) -> list | None:
    """mmvq with the residual added, writing the add's memory in the product's layout, where everything is on this
    GPU and the add's memory lies clear of the weights and the temp block, and clear of or exactly over the residual
    (each element is read before it is written)."""
    m, r, out = f.head, f.residual, f.add
    if not backend.on_device(m, r, out, *m.src[:2]):
        return None
    q8 = handoff.quantized_b(backend, m)         # b's q8_1 blocks read while the add's memory is written
    others = [extent(m.src[0])] + _temp_range(backend, m) + ([] if extent(r) == extent(out) else [extent(r)])
    if not apart(out, others + ([extent(m.src[1])] if q8 else [])):
        return None
    steps = quant.mmvq_steps(backend, m, dst=m, dst_ptr=tensor_ptr(out), residual=r, q8=q8)
    if steps is not None:
        steps[-1].name = f.name(kernel_name(m, "mmvq"))
    return steps


register(ops=("mul_mat",), refusal=refusal, name=kernel_name, temp_size=temp_size, steps=steps,
         impls=("cublaslt", "mmv", "mmvq"), choose=choose, accepts=accepts,
         fuses={"epilogue": Fused(epilogue_run, takes=lambda node, impl: impl == "cublaslt", accepts=epilogue_accepts,
                                  cast=True, residual=True),
                "attention": Fused(attention.run, accepts=attention.accepts, cast=True),
                "glu": Fused(glu_run, takes=_mmvq, accepts=glu_accepts),
                "mul_mat_add": Fused(mul_mat_add_run, takes=_mmvq, accepts=mul_mat_add_accepts)})
