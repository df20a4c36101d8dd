"""The conv family on CUDA: im2col (1-D, 2-D), conv_1d, conv_2d, conv_2d_dw (WHCN and CWHN) and
conv_transpose_2d. conv_2d has four implementations: "implicit" (a shared-memory tiled implicit GEMM, no scratch),
"im2col" (bands of the im2col matrix in the temp block, each followed by one cuBLASLt GEMM), "direct" (shallow
reductions) and "cudnn" (cuDNN's graph API where its Python frontend is installed: ../cudnn_conv.py); the others run
one thread per dst element summing its taps, and a 3x3 CWHN conv_2d_dw runs the fast conv_dw3_cwhn kernel (with
a fused bias and activation when the fusion pass finds them). Every source may have any strides, dst is written
through its nb (so conv_2d_dw's CWHN result keeps its layout). Math runs in float. The integer parameters
(strides, paddings, dilations) travel as int32 in Args.ip.
"""
from __future__ import annotations

from types import SimpleNamespace

from ....types import F32
from ...kernel import Fused
from .. import cudnn_conv
from ..cublas import MISSING, WORKSPACE, Gemm
from ..gemm_plan import align_temp, contiguous, gemm_type
from ..registry import register
from .common import FLOATS, SUFFIX, apart, extent, tensor_ptr
from .epilogue import act_id

DW3_STRIDES = (1, 2)            # the strides of the fast 3x3 CWHN depthwise kernel (conv_dw3_cwhn)
DW3_BLOCK = 128
DW3_TW = 4                      # outputs along a row per thread
DIRECT_K = 32                   # conv_2d_direct: the deepest reduction Cin * KH * KW (taps kept in registers)
DIRECT_W = 4096                 # conv_2d_direct: the most kernel values K * Cout (floats in shared memory)
DIRECT_BLOCKS = 1024            # conv_2d_direct's grid at most: each block stages the kernel once, then loops


def int_params(node) -> tuple:
    """Args.ip of the conv kernels: (s0, s1, d0, p0, p1, d1) (CONV_PARAMS); none for conv_transpose_2d."""
    if node.op == "conv_transpose_2d":
        return ()
    p = node.op_params
    return p["s0"], p["s1"], p["d0"], p["p0"], p["p1"], p["d1"]


def _extent(t) -> int:
    """Bytes from t's first to past its last element within one image (dims 0-2)."""
    return sum((n - 1) * b for n, b in zip(t.ne[:3], t.nb[:3])) + t.type.size


def _cwhn_contiguous(t) -> bool:
    """Whether t's (W, H, C, N) elements are packed channels first (C, W, H, N) with no gaps (size-1 dims
    ignored)."""
    expected = t.type.size
    for k in (2, 0, 1, 3):
        if t.ne[k] != 1 and t.nb[k] != expected:
            return False
        expected *= t.ne[k]
    return True


def dw_fast(node) -> int | None:
    """The stride of the fast 3x3 CWHN depthwise kernel (conv_dw3_cwhn) that runs `node`, or None: a 3x3
    kernel, equal strides in DW3_STRIDES, dilation 1, a channels-contiguous input, a contiguous CWHN F32 result
    (F32, F16 or BF16 through a fused cast), and 32-bit offsets within one image."""
    if node.op != "conv_2d_dw" or node.type != F32 or any(s.type not in FLOATS for s in node.src[:2]):
        return None
    a, b = node.src[:2]
    p = node.op_params
    OW, OH, C, N = node.ne
    if a.ne[:2] != (3, 3) or p["s0"] != p["s1"] or p["s0"] not in DW3_STRIDES or p["d0"] != 1 or p["d1"] != 1:
        return None
    if (b.ne[2] > 1 and b.nb[2] != b.type.size) or not _cwhn_contiguous(node):
        return None
    if max(_extent(b), _extent(node)) >= 1 << 31 or C * -(-OW // DW3_TW) * OH * N >= 1 << 31:
        return None
    return p["s0"]


def dw_vec(node, ptrs=()) -> int:
    """Channels per thread of conv_dw3_cwhn: 4 (vector loads and stores) when C % 4 == 0 and the input's
    strides and the given device addresses allow, else 1."""
    b, es = node.src[1], node.src[1].type.size
    if node.ne[2] % 4 or any(nb % (4 * es) for nb, n in zip(b.nb, b.ne) if n > 1 and nb != es):
        return 1
    return 4 if all(p % 16 == 0 for p in ptrs) else 1


def _dw3_name(node, vec: int, out_type=F32) -> str:
    a, b = node.src[:2]
    return f"conv_dw3_cwhn_s{dw_fast(node)}_v{vec}_{SUFFIX[a.type]}_{SUFFIX[b.type]}_{SUFFIX[out_type]}"


def _dw3_config(node, vec: int) -> tuple:
    OW, OH, C, N = node.ne
    total = C // vec * -(-OW // DW3_TW) * OH * N
    return -(-total // DW3_BLOCK), DW3_BLOCK


def _fused_launch(backend, node, kernel: str, dst, layout, srcs: list, config, fused) -> list:
    """[the launch of `kernel` writing `layout` at dst (the node, or the last node of its fused epilogue), taking
    the epilogue's bias as a third source, its activation as iop and its name]."""
    if fused is not None:
        srcs = srcs + [(tensor_ptr(fused.bias), fused.bias)]
    launch = backend.launch(node, kernel, tensor_ptr(dst), layout, srcs, params(node), config, act_id(fused),
                            int_params(node))
    if fused is not None:
        launch.name = fused.name(launch.name)
    return [launch]


def dw_steps(backend, node, fused=None) -> list:
    """conv_2d_dw by conv_dw3_cwhn (dw_fast(node) is not None); with `fused` (an Epilogue of the fusion pass:
    optional cast, bias add, optional activation) the result goes to the epilogue's last node, in its type, with
    bias and activation."""
    a, b = node.src[:2]
    dst = fused.last if fused is not None else node
    pb = tensor_ptr(b)
    vec = dw_vec(node, (pb, tensor_ptr(dst)))
    out = SimpleNamespace(ne=node.ne, nb=tuple(nb // F32.size * dst.type.size for nb in node.nb),
                          nelements=node.nelements)       # the conv's CWHN layout in the result's type
    return _fused_launch(backend, node, _dw3_name(node, vec, dst.type), dst, out, [(tensor_ptr(a), a), (pb, b)],
                         _dw3_config(node, vec), fused)


def kernel_name(node, impl=None) -> str:
    a, b = node.src[0], node.src[1]
    if node.op == "im2col":
        return f"im2col_{'2d' if node.op_params['is_2D'] else '1d'}_{SUFFIX[b.type]}_{SUFFIX[node.type]}"
    if dw_fast(node) is not None:
        return _dw3_name(node, dw_vec(node))
    if node.op == "conv_2d_dw" and node.nb[2] < node.nb[0]:       # channels innermost in dst's memory
        return f"conv_2d_dw_cwhn_{SUFFIX[a.type]}_{SUFFIX[b.type]}"
    return f"{node.op}_{SUFFIX[a.type]}_{SUFFIX[b.type]}"


def refusal(node) -> str | None:
    a, b = node.src[0], node.src[1]
    if b.type not in FLOATS or node.type not in FLOATS or (node.op != "im2col" and a.type not in FLOATS):
        return (f"{node.op} kernels take F32/F16 tensors; got "
                f"{[s.type.name for s in node.src if s is not None]} -> {node.type.name}")
    return None


def launch_config(node):
    """conv_2d: one block of 256 threads per 64 x 64 output tile; the others: the default grid-stride launch."""
    if node.op != "conv_2d":
        return None
    tiles = -(-node.ne[2] // 64) * -(-(node.ne[0] * node.ne[1] * node.ne[3]) // 64)
    return min(tiles, 1 << 16), 256


def params(node) -> tuple:
    """conv_transpose_2d's stride as p0 (the other conv ops take int_params)."""
    return (node.op_params["stride"],) if node.op == "conv_transpose_2d" else ()


# -- conv_2d: direct, im2col + cuBLASLt, or implicit GEMM ---------------------------------------------------------
# A shallow reduction K = Cin * KH * KW (<= DIRECT_K) runs conv_2d_direct, which takes a fused epilogue (bias over
# the output channels, activation, a cast). Where K is deep enough, conv_2d runs as im2col bands of output rows
# written to the temp block (at most COLS_BUDGET bytes per band) each followed by one cuBLASLt GEMM
# dst[pos, co] = cols[k, pos]^T kernel[k, co] straight into dst's memory; the rest run the implicit GEMM.
# cuDNN runs it only where measured fastest (autotune) or forced. CUDABackend(force={"conv_2d": "direct" | "implicit" |
# "im2col" | "cudnn"}) forces one way (tests, benchmarks); a forced cudnn that cuDNN refuses (or that has no frontend
# installed) runs choose()'s implementation.
COLS_BUDGET = 32 << 20
IM2COL_MIN_K = 64


def _depth(node) -> int:
    """The reduction K = Cin * KH * KW of a conv_2d."""
    return node.src[0].ne[0] * node.src[0].ne[1] * node.src[0].ne[2]


def im2col_possible(node) -> bool:
    """Whether conv_2d can run as im2col + cuBLASLt: cuBLASLt present, dst's rows contiguous, 32-bit offsets."""
    OW = node.ne[0]
    return (MISSING is None and node.nb[0] == 4 and (node.ne[1] == 1 or node.nb[1] == 4 * OW)
            and node.ne[2] * node.ne[1] * OW * 4 < 1 << 31 and _depth(node) * OW < 1 << 31
            and max(_depth(node), node.ne[1]) < 1 << 16)      # im2col's grid dimensions y and z


def direct_possible(node) -> bool:
    """Whether conv_2d_direct can run `node`: K <= DIRECT_K and the kernel's rows (K rounded up to 4) fit DIRECT_W."""
    return (_depth(node) <= DIRECT_K and -(-_depth(node) // 4) * 4 * node.src[0].ne[3] <= DIRECT_W
            and node.ne[0] * node.ne[1] * node.ne[3] < 1 << 31)


def choose(node, backend) -> str:
    """direct for a shallow reduction, im2col where it is possible and K is deep enough, else the implicit GEMM."""
    if direct_possible(node):
        return "direct"
    return "im2col" if im2col_possible(node) and _depth(node) >= IM2COL_MIN_K else "implicit"


def accepts(node, impl: str, backend) -> bool:
    return {"im2col": im2col_possible, "direct": direct_possible, "cudnn": cudnn_conv.accepts}.get(
        impl, lambda n: True)(node)


def _runs(node, impl: str) -> str:
    """impl, or choose's for a cudnn that cuDNN refuses."""
    return choose(node, None) if impl == "cudnn" and not cudnn_conv.accepts(node) else impl


def direct_steps(backend, node, fused=None) -> list:
    """conv_2d by conv_2d_direct; with `fused` (an Epilogue: optional cast, bias over ne[2], optional activation)
    the result goes to the epilogue's last node, in its type."""
    a, b = node.src[:2]
    dst = fused.last if fused is not None else node
    blocks = min(DIRECT_BLOCKS, -(-(node.ne[0] * node.ne[1] * node.ne[3]) // 256))
    return _fused_launch(backend, node, f"conv_2d_direct_{SUFFIX[a.type]}_{SUFFIX[b.type]}_{SUFFIX[dst.type]}", dst,
                         dst, [(tensor_ptr(a), a), (tensor_ptr(b), b)], (blocks, 256), fused)


def uses_im2col(node, impl: str) -> bool:
    """Whether `impl` runs as im2col + cuBLASLt (a forced im2col that is not possible runs implicit)."""
    return impl == "im2col" and im2col_possible(node)


def _bands(node) -> list:
    """[(n, oh0, rows)] of the im2col bands."""
    K, OW, OH = _depth(node), node.ne[0], node.ne[1]
    per_row = K * OW * gemm_type(node).size
    rows = max(1, min(OH, COLS_BUDGET // per_row))
    count = -(-OH // rows)
    rows = -(-OH // count)
    return [(n, oh0, min(rows, OH - oh0)) for n in range(node.ne[3]) for oh0 in range(0, OH, rows)]


def _positions_first(node) -> bool:
    """Whether im2col runs as im2col_pos (an image with W before C in memory), else im2col_cf."""
    b = node.src[1]
    return b.nb[0] <= b.nb[2]


def _kernel_copy(node):
    """(the kernel as the GEMM reads it, or None where it reads it in place; the view copied): a contiguous copy in
    the GEMM type, for im2col_cf with k = (kh, kw, ci) (the view (Cin, KW, KH, Cout) of the kernel)."""
    a, gtype = node.src[0], gemm_type(node)
    if _positions_first(node):
        return (None, a) if a.type == gtype and a.is_contiguous() else (contiguous(a, gtype), a)
    view = SimpleNamespace(ne=(a.ne[2], a.ne[0], a.ne[1], a.ne[3]), nb=(a.nb[2], a.nb[0], a.nb[1], a.nb[3]),
                           nelements=a.nelements, name=a.name)
    return contiguous(view, gtype), view


def temp_size(node, impl: str, backend) -> int:
    """im2col conv_2d: cuBLASLt's workspace, the largest band of im2col matrix, a kernel copy when needed; cudnn:
    cuDNN's workspace and copies (cudnn_conv.temp_size)."""
    impl = _runs(node, impl)
    if impl == "cudnn":
        return cudnn_conv.temp_size(node)
    if not uses_im2col(node, impl):
        return 0
    cols = _depth(node) * node.ne[0] * max(r for _, _, r in _bands(node)) * gemm_type(node).size
    c, _ = _kernel_copy(node)
    return WORKSPACE + align_temp(cols) + (align_temp(c.nbytes) if c is not None else 0)


def _im2col_config(pos: bool, OW: int, rows: int, CI: int) -> tuple:
    """(grid, block) of im2col_pos (4 positions along ow a thread) or im2col_cf (4 channels a thread)."""
    quads = -(-(OW if pos else CI) // 4)
    block = min(256, -(-quads // 32) * 32)
    return ((-(-quads // block), rows, CI), block) if pos else ((OW * rows, -(-quads // block)), block)


def _cf_vector(b, pb: int) -> int:
    """im2col_cf's iop: 1 when the image's channels are contiguous and its pixels 4-channel aligned (vector access)."""
    es = b.type.size
    return int(b.ne[2] % 4 == 0 and b.nb[2] == es and all(nb % (4 * es) == 0 for nb in (b.nb[0], b.nb[1], b.nb[3]))
               and pb % (4 * es) == 0)


def conv_2d_steps(backend, node, impl: str) -> list:
    """The direct or implicit GEMM's one launch, the im2col bands and their GEMMs, or cuDNN's steps."""
    impl = _runs(node, impl)
    if impl == "cudnn":
        return cudnn_conv.steps(backend, node)
    if impl == "direct" and direct_possible(node):
        return direct_steps(backend, node)
    if not uses_im2col(node, impl):
        return [backend.launch_node(node)]
    a, b = node.src[:2]
    gtype = gemm_type(node)
    KW, KH, CI, CO = a.ne
    K, OW = KW * KH * CI, node.ne[0]
    temp = backend.temp_ptr(node)
    cols = temp + WORKSPACE
    bands = _bands(node)
    pk, steps_ = tensor_ptr(a), []
    c, view = _kernel_copy(node)
    if c is not None:
        pk = cols + align_temp(K * OW * max(r for _, _, r in bands) * gtype.size)
        steps_.append(backend.launch(node, f"copy_{SUFFIX[a.type]}_{SUFFIX[gtype]}", pk, c, [(tensor_ptr(a), view)]))
    kmat = SimpleNamespace(ne=(K, CO, 1, 1), type=gtype)
    tf32 = gtype == F32 and backend.allow_tf32
    name = f"cublaslt_conv_{SUFFIX[a.type]}_{SUFFIX[b.type]}" + ("_tf32" if tf32 else "")
    pb, pd = tensor_ptr(b), tensor_ptr(node)
    img = SimpleNamespace(ne=b.ne, nb=b.nb)
    pos = _positions_first(node)
    calls = {}              # rows -> [(band index, (A, B, D) pointers)]: one Gemm per band height
    for j, (n, oh0, rows) in enumerate(bands):
        calls.setdefault(rows, []).append((j, (cols, pk, pd + n * node.nb[3] + oh0 * node.nb[1])))
    gemm_of = {}
    for rows, items in calls.items():
        P = OW * rows
        d = SimpleNamespace(ne=(P, CO, 1, 1), nb=(4, node.nb[2], 0, 0), type=F32)
        g = Gemm(backend, node, name, (cols, SimpleNamespace(ne=(K, P, 1, 1), type=gtype), (not pos, P if pos else K)),
                 (pk, kmat, (True, K)), CO, [p for _, p in items], 1, (0, 0, 0), tf32, temp, None, d)
        for i, (j, _) in enumerate(items):
            gemm_of[j] = g.at(i)
    for j, (n, oh0, rows) in enumerate(bands):
        band = SimpleNamespace(ne=(K, OW, rows, oh0), nb=(gtype.size, K * gtype.size, K * OW * gtype.size, 0),
                               nelements=K * OW * rows)
        steps_.append(backend.launch(node, f"im2col_{'pos' if pos else 'cf'}_{SUFFIX[b.type]}_{SUFFIX[gtype]}", cols,
                                     band, [(tensor_ptr(a), a), (pb + n * b.nb[3], img)], params(node),
                                     _im2col_config(pos, OW, rows, CI), 0 if pos else _cf_vector(b, pb),
                                     int_params(node)))
        steps_.append(gemm_of[j])
    return steps_


def dw_or_direct_steps(backend, node, impl=None) -> list:
    """conv_2d_dw by conv_dw3_cwhn where it applies, else the op's one-thread-per-output kernel."""
    return dw_steps(backend, node) if dw_fast(node) is not None else [backend.launch_node(node)]


def epilogue_accepts(f) -> bool:
    """The epilogue's nodes contiguous, of the add's type (F32, or a fused cast's)."""
    return f.head.nelements > 0 and all(n.is_contiguous() and n.type == f.add_node.type for n in f.nodes[1:])


def _clear(backend, f) -> bool:
    """Everything on this GPU, the bias 16-byte aligned, the result clear of every source (taps read neighbours)."""
    srcs = [f.bias, *f.head.src[:2]]
    return (backend.on_device(f.head, f.last, *srcs) and tensor_ptr(f.bias) % 16 == 0
            and apart(f.last, [extent(t) for t in srcs]))


register(ops=("conv_2d",), refusal=refusal, name=kernel_name, params=params,
         int_params=int_params, launch_config=launch_config, temp_size=temp_size, steps=conv_2d_steps,
         impls=("implicit", "im2col", "direct", "cudnn"), choose=choose, accepts=accepts,
         fuses={"epilogue": Fused(lambda backend, f: direct_steps(backend, f.head, f) if _clear(backend, f) else None,
                                  takes=lambda node, impl: impl == "direct" and direct_possible(node),
                                  accepts=epilogue_accepts, act=True, cast=True)})
register(ops=("im2col", "conv_1d", "conv_2d_dw", "conv_transpose_2d"), refusal=refusal,
         name=kernel_name, params=params, int_params=int_params, launch_config=launch_config,
         steps=dw_or_direct_steps,
         fuses={"epilogue": Fused(lambda backend, f: dw_steps(backend, f.head, f) if _clear(backend, f) else None,
                                  takes=lambda node, impl: dw_fast(node) is not None, accepts=epilogue_accepts,
                                  act=True, cast=True)})
