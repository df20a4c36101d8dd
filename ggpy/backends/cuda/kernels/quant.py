"""ggml's block-quantized types on CUDA: dequantizing, quantizing, get_rows from them, and the dot-product kernel of
mul_mat with few columns (a quantized, or a float a grouped over b's matrices or of another type than b).

Every type is a functor `dq_<type>::at8(row, nb0, c, v)`: elements 8c .. 8c + 7 of a row (ggml's dequantize_row_*
formulas, in float32; dq_float<T> reads a float row of element stride nb0). On it:
- `copy_<q>_<f>`: dequantizing copies (cpy, cast, cont from a quantized tensor; mul_mat's dequantized operand), a
  thread per 8 elements, any strides between rows;
- `copy_f32_<q>`: quantizing copies into Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml's quantize_row_*_ref, as gguf.quants,
  without fused multiply-adds): a warp per 32-block, its lanes the block's elements;
- `get_rows_<q>`: rows dequantized into F32, a thread per 8 elements;
- `mmv_<a>_<b>`: mul_mat with at most MMV_MAX_N columns of b per matrix (generation): a warp per row of a, which it
  reads once for every column, F32 accumulation: mul_mat's implementation `mmv`. A quantized a with more than
  MMVQ_MAX_BATCH columns runs as a cuBLASLt F16 GEMM on a dequantized copy (matmul.py's `cublaslt`);
- `quantize_q8_1_f32` + `mmvq_<a>` (quant_mmvq.cuh): the same products on integer dot products (ggml's mmvq): b's
  columns quantized to q8_1 blocks in the node's temp block, then __dp4a with a's quants, a warp per row of a:
  mul_mat's implementation `mmvq`, the default for a quantized a (its error is the activations' 8-bit rounding,
  nmse ~1e-5; mmv is exact); `mmvq_glu_<a>` the gate and up products with silu(gate) * up in one launch. A small
  product (a's matrix at most MMVQ_SHARED_WEIGHTS bytes, rows of at most MMVQ_SHARED_MAX_K, b's columns in shared memory) runs as one launch,
  `mmvq_s[_glu]_<a>`, each block quantizing b itself: a launch less where launches, not bytes, take the time. A big
  product with one column (a's matrix from MMVQ_STREAM_BYTES) runs as `mmvq_v[_glu]_<a>`: a few blocks an SM whose
  warps stream rows, the next row's weights loaded before the current row's dots (1.3-1.8x the bandwidth, H200).
- `mmvq_b[_glu]_<a>`: the batch kernels (mmvq_batch: MMV_MAX_N < N <= MMVQ_MAX_BATCH columns, a server's batched
  decode, a token a sequence): the same two launches, a warp's row(s) of a read once for all N columns (NM = 16
  accumulators a lane, the columns' sums gathered by reduce_cols: 16 shuffles, not 80), b's q8_1 columns copied into
  shared memory first where few blocks read them (mmvq_batch_plan); the residual (mul_mat_add), gate/up (glu) and
  norm (norm_mat_vec: rms_norm_mul_q8_1_b, then the products) fusions take them as they take mmvq; no shared-memory
  quantizing (mmvq_s) nor stream variant. Where cuBLASLt dequantized the weights every step, they are read once:
  SmolLM2-135M Q4_1's batched step of 16 tokens (H200) 398 kernels, 2.43 ms of device time, where cuBLASLt's took
  911 and 2.55 (the batch's own time now its RMSNorms, attention and these products, each a few us: launch-bound).
  MMVQ_MAX_BATCH 16, not 32 (measured, H200, 16 columns, us a product in a chain of model weights, the kernel vs
  cuBLASLt with its copies): SmolLM2's q 5.4 vs 6.5, gate 7.0 vs 7.4, down 10.2 vs 8.7, head (Q8_0 49152 rows) 56.5
  vs 51.9; 1B's Q4_K q 15.2 vs 13.3, gate 29.1 vs 31.4, Q6_K down 44.7 vs 38.0; 7B's Q4_0 gate 57.5 vs 83.1, down
  60.3 vs 85.6; at 9 columns it wins everywhere (4.6 vs 6.0 .. 40.8 vs 85.1). Its time grows with N (16 columns'
  dot products a row, the activations read per row: dp4a work and L1 bytes, not weight bytes, bound it from ~12
  columns on), cuBLASLt's stays flat to 32 (13.4 us 1B q, 85.9 7B down): at 32 two passes of 16 would cost about
  twice the 16-column time, beyond cuBLASLt's on every shape; and NM = 16 already takes the 128 registers of the
  K-quants' kernels (Q6_K spills 16 bytes), where 32 accumulators (64 with GLU) would spill.
"""
from __future__ import annotations

from ....ops.layout import QUANTIZE_TO
from types import SimpleNamespace

from ....types import F32, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0
from ...base import WEIGHTS
from ..gemm_plan import align_temp
from .common import FLOATS, SUFFIX, tensor_ptr

MMV_MAX_N = 8           # columns of b per matrix the dot-product kernel takes (ggml's mmvq takes 8 too)
MMVQ_MAX_BATCH = 16     # columns of b per matrix the integer dot-product kernel takes (its batch kernels beyond
#                         MMV_MAX_N: mmvq_b; why 16: the module's docstring)
MMV_WARPS = 4           # warps per block (quant_mmvq.cuh's MMVQ_BOUNDS assumes 4 and MMVQ_SHARED_WARPS <= 16)
MAX_GRID_Y = 65535      # CUDA's limit on gridDim.y: the matrices of b
MMVQ_RESIDUAL = 1       # quant_mmvq.cuh's iop flag: add src2 (F32, dst's layout) to the product
MMVQ_WEIGHTS = 2        # its iop flag: a (and the up rows) model weights, loaded before the grid wait (model_weight)
MMVQ_ALIGN = {Q4_K: 16, Q5_K: 16, Q4_1: 4, Q5_1: 4}     # bytes of a's row starts the kernel's loads need (else 2)
QUANTIZE_BLOCK = 256
MMVQ_SHARED_WEIGHTS = 4 << 20   # a's matrices up to this size: one launch, b quantized by every block (mmvq_s)
MMVQ_SHARED_MAX_K = 1536        # and rows up to this long (each block quantizes all K of b: at K 2048 the two-launch
#                                 kernel took 4.7 us where mmvq_s took 7.3, Q4_K 2048x2048, H200)
MMVQ_SHARED_MAX = 48 << 10      # bytes of b's q8_1 columns in a block's shared memory (no opt-in beyond 48 KiB)
MMVQ_SHARED_WARPS = 16          # rows of a per block of mmvq_s and norm_mmvq* (b quantized once per block;
#                                 16 against 8: SmolLM2's token 9% faster, H200: fewer blocks, free SMs)
MMVQ_STREAM_TYPES = (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K)    # 32-element units: the stream kernel measured faster (H200)
MMVQ_STREAM_BYTES = 2 << 20     # a's matrices from this size: the stream kernel (mmvq_v) where it fits
MMVQ_STREAM_BLOCKS = 8          # its blocks per SM (4 with GLU: twice the weights in flight a warp)
MMVQ_BATCH_ROWS = 2             # rows a warp of the batch kernel takes (1 with GLU) where a has many rows: from
MMVQ_BATCH_ROWS_FROM = 32       # this many an SM (H200, 16 columns: 1B's 8192-row gate 38 us with 2 a warp, 58 with one;
#                                 SmolLM2's 576-1536 rows and 1B's 2048 slower with 2), or b's columns over MMVQ_SHARED_MAX
#                                 (7B's down, K 11008: 60 us with 2, 100 with one: each row pair reads them from L2)
MMVQ_BATCH_COPY_BLOCKS = 3      # blocks an SM up to which the batch kernel copies b's columns into shared memory (16
#                                 columns: SmolLM2's q 5.7 us with, 7.1 without; 1B's 2048-row q 19.5 with, 15.2 without)


def copy_refusal(node) -> str | None:
    """Why a copy from or into a quantized type cannot run on CUDA (None: it can)."""
    a = node.src[0]
    if a.type.quantized and node.type in FLOATS:
        return None
    if node.type in QUANTIZE_TO and a.type == F32:
        return None if node.nelements % 32 == 0 else f"{node.op} into {node.type.name}: whole blocks of 32 only"
    return (f"{node.op} on CUDA copies a quantized type into F32, F16 or BF16, or F32 into "
            f"{', '.join(t.name for t in QUANTIZE_TO)}, not {a.type.name} -> {node.type.name}")


def mmv_fits(node) -> bool:
    """Whether the dot-product kernel can run a mul_mat: few columns of b per matrix (and at most MAX_GRID_Y
    matrices, one block row each), b float, a quantized or a float a with K a multiple of 8."""
    a, b = node.src[:2]
    if b.ne[1] > MMV_MAX_N or b.type not in FLOATS or b.ne[2] * b.ne[3] > MAX_GRID_Y:
        return False
    return a.type.quantized or (a.type in FLOATS and a.ne[0] % 8 == 0)


def mmv_preferred(node) -> bool:
    """Whether a mul_mat runs as the dot-product kernel by default (matmul.choose): where it fits, a quantized a,
    or a float a that cuBLASLt would take a matrix at a time (several matrices of a each repeated over a group of
    b's: grouped-query attention; a single matrix broadcast over b's stays on cuBLASLt, which batches it) or
    convert whole for the product (F16 weights times F32 activations)."""
    a, b = node.src[:2]
    grouped = any(1 < a.ne[k] < b.ne[k] for k in (2, 3))
    return mmv_fits(node) and (a.type.quantized or grouped or a.type != b.type)


def mmv_steps(backend, node) -> list:
    """The dot-product kernel's launch; over more than MMV_MAX_N columns (a batch whose a mmvq cannot load), a launch
    per MMV_MAX_N of them."""
    a, b = node.src[:2]
    grid, N = (-(-a.ne[1] // MMV_WARPS), b.ne[2] * b.ne[3]), b.ne[1]
    return [backend.launch(node, mmv_name(node), tensor_ptr(node) + n0 * node.nb[1], _columns(node, n0, N),
                           [(tensor_ptr(a), a), (tensor_ptr(b) + n0 * b.nb[1], _columns(b, n0, N))],
                           config=(grid, 32 * MMV_WARPS)) for n0 in range(0, N, MMV_MAX_N)]


def _columns(t, n0: int, N: int):
    """t, or where N > MMV_MAX_N its columns n0 .. n0 + MMV_MAX_N (fewer at the end) from n0's address on."""
    n = min(MMV_MAX_N, N - n0)
    return t if N <= MMV_MAX_N else SimpleNamespace(ne=(t.ne[0], n, *t.ne[2:]), nb=t.nb,
                                                    nelements=t.nelements // t.ne[1] * n)


def mmv_name(node) -> str:
    return f"mmv_{SUFFIX[node.src[0].type]}_{SUFFIX[node.src[1].type]}"


def mmvq_fits(node) -> bool:
    """Whether the integer dot-product kernel can run a mul_mat: a quantized, b F32 with at most MMVQ_MAX_BATCH
    columns per matrix (more than MMV_MAX_N: the batch kernels, mmvq_batch)."""
    a, b = node.src[:2]
    return a.type.quantized and b.type == F32 and b.ne[1] <= MMVQ_MAX_BATCH and b.ne[2] * b.ne[3] <= MAX_GRID_Y


def mmvq_batch(node) -> bool:
    """Whether a product mmvq runs takes its batch kernels (mmvq_b[_glu]: more than MMV_MAX_N columns of b per
    matrix), which neither quantize b in shared memory nor stream, nor fuse into norm_mmvq."""
    return node.src[1].ne[1] > MMV_MAX_N


def mmvq_shared(node) -> int:
    """Bytes of shared memory of the one-launch kernel (b's N columns of a matrix as q8_1: K int8 per column, then a
    (d, d * sum q) float pair per 32 elements) where it runs the node, else 0."""
    a, b = node.src[:2]
    smem = b.ne[1] * b.ne[0] * 5 // 4
    small = a.type.row_bytes(a.ne[0]) * a.ne[1] <= MMVQ_SHARED_WEIGHTS and a.ne[0] <= MMVQ_SHARED_MAX_K
    return smem if small and smem <= MMVQ_SHARED_MAX and not mmvq_batch(node) else 0


def mmvq_temp_size(node) -> int:
    """Bytes of b's columns as q8_1 for the two-launch kernel (none for the one-launch one)."""
    b = node.src[1]
    cols = b.nelements // b.ne[0]
    return 0 if mmvq_shared(node) else align_temp(cols * b.ne[0] * 5 // 4)


def mmvq_aligned(a) -> bool:
    """Whether a's rows start where the kernel's loads need them (GGUF weights always do)."""
    align = MMVQ_ALIGN.get(a.type, 2)
    return tensor_ptr(a) % align == 0 and all(nb % align == 0 for nb in a.nb[1:])


def model_weight(t) -> bool:
    """Whether t is a model weight: a leaf of a buffer that graphs leave alone (alloc_ctx_tensors'), no input, read
    whole (a KV cache, the same kind of leaf, is read through views of the set_rows that write it): no kernel writes
    it, so a mat-vec may load it before the kernel before it ends (PDL)."""
    return (t.op is None and t.view_src is None and not t.is_input and t.buffer is not None
            and t.buffer.usage == WEIGHTS)


def mmvq_rows_per_warp(a, b, glu: bool) -> int:
    """Rows of a a warp of the two-launch mmvq takes (quant_mmvq.cuh's mmvq_entry): several where b has one column and
    a's rows at most 32 units (a unit a lane), else one."""
    few = b.ne[1] == 1 and a.ne[0] // (64 if a.type in (Q4_K, Q5_K) else 32) <= 32
    return (2 if glu else 4) if few else 1


def mmvq_batch_plan(backend, a, b, glu: bool) -> tuple:
    """(rows a warp, bytes of shared memory) of the batch kernel (mmvq_batch_entry): MMVQ_BATCH_ROWS rows a warp (each
    column's activations loaded once for both: fewer warps, each longer) where a's rows over b's matrices are
    MMVQ_BATCH_ROWS_FROM an SM or more, or b's q8_1 columns exceed what L1 holds (MMVQ_SHARED_MAX), else one (one with
    GLU); the columns copied into shared memory first where they fit and the blocks are at most MMVQ_BATCH_COPY_BLOCKS
    an SM (few rows: each of N columns would cost an L2 round trip; more blocks: their copies cost more than L1's
    reuse saves)."""
    x, sms = b.ne[1] * b.ne[0] * 5 // 4, backend.device.sms
    many = a.ne[1] * b.ne[2] * b.ne[3] >= MMVQ_BATCH_ROWS_FROM * sms or x > MMVQ_SHARED_MAX
    rw = MMVQ_BATCH_ROWS if many and not glu else 1
    blocks = -(-a.ne[1] // (MMV_WARPS * rw)) * b.ne[2] * b.ne[3]
    return rw, x if x <= MMVQ_SHARED_MAX and blocks <= MMVQ_BATCH_COPY_BLOCKS * sms else 0


def mmvq_stream_units(a, b) -> int:
    """Units a lane of the stream kernel takes per row (1 or 2; 0: the product is not the stream kernel's): one
    column of b, one matrix, a big matrix of a type with 32-element units, rows of at most 64 units."""
    units = a.ne[0] // 32
    one = b.ne[1] == 1 and b.ne[2] * b.ne[3] == 1 and a.ne[2] * a.ne[3] == 1
    big = a.type in MMVQ_STREAM_TYPES and a.type.row_bytes(a.ne[0]) * a.ne[1] >= MMVQ_STREAM_BYTES
    return -(-units // 32) if one and big and units <= 64 else 0


def mmvq_steps(backend, node, dst=None, dst_ptr=None, residual=None, gate=None, up=None, q8=None) -> list:
    """quantize_q8_1 of b into the node's temp block, then mmvq (or mmvq_s alone, mmvq_shared) writing `dst` (default
    the node; its layout, at dst_ptr) plus `residual` (F32, dst's layout); or, with `gate` and `up` (weights of one
    type and layout, the node one of their products), the glu kernel writing silu(gate x) * (up x); with `q8` (the
    address of b's columns already quantized in the temp block's layout), mmvq alone. Rows the kernel cannot load:
    mmv (the exact kernel) when nothing is fused, else None."""
    a, b = node.src[:2]
    a = a if gate is None else gate
    if not (mmvq_aligned(a) and (up is None or mmvq_aligned(up))):
        return mmv_steps(backend, node) if dst is None and up is None else None
    dst = node if dst is None else dst
    src2 = up if up is not None else residual
    extra = [] if src2 is None else [(tensor_ptr(src2), src2)]
    glu, iop = "glu_" if up is not None else "", MMVQ_RESIDUAL if residual is not None else 0
    iop |= MMVQ_WEIGHTS if model_weight(a) and (up is None or model_weight(up)) else 0
    dst_ptr = tensor_ptr(dst) if dst_ptr is None else dst_ptr
    smem = mmvq_shared(node) if q8 is None else 0
    if smem:
        grid = (-(-a.ne[1] // MMVQ_SHARED_WARPS), b.ne[2] * b.ne[3])
        product = backend.launch(node, f"mmvq_s_{glu}{SUFFIX[a.type]}", dst_ptr, dst, [(tensor_ptr(a), a),
                                 (tensor_ptr(b), b)] + extra, config=(grid, 32 * MMVQ_SHARED_WARPS), iop=iop)
        product.shared = smem
        return [product]
    temp, cols = q8 or backend.temp_ptr(node), b.nelements // b.ne[0]
    warps = cols * b.ne[0] // 32
    quantize = [] if q8 else [backend.launch(node, "quantize_q8_1_f32", temp, SimpleNamespace(
        ne=b.ne, nb=b.nb, nelements=cols * b.ne[0]), [(tensor_ptr(b), b)], config=(
        min(-(-warps // (QUANTIZE_BLOCK // 32)), 1 << 16), QUANTIZE_BLOCK))]
    stream = mmvq_stream_units(a, b)
    if stream:      # a few blocks an SM streaming rows, two in flight a warp
        blocks = backend.device.sms * MMVQ_STREAM_BLOCKS // (2 if glu else 1)
        grid, kernel, ints = (min(blocks, -(-a.ne[1] // MMV_WARPS)), 1), f"mmvq_v_{glu}{SUFFIX[a.type]}", (stream,)
    else:
        batch = mmvq_batch(node)
        rw, smem = mmvq_batch_plan(backend, a, b, up is not None) if batch else (mmvq_rows_per_warp(a, b, up is not None), 0)
        grid, kernel = (-(-a.ne[1] // (MMV_WARPS * rw)), b.ne[2] * b.ne[3]), f"mmvq_{'b_' if batch else ''}{glu}{SUFFIX[a.type]}"
        ints = (rw, 1 if smem else 0) if batch else (rw,)
    product = backend.launch(node, kernel, dst_ptr, dst, [(tensor_ptr(a), a), (temp, b)] + extra,
                             config=(grid, 32 * MMV_WARPS), iop=iop, ints=ints)
    product.shared = smem
    return quantize + [product]
