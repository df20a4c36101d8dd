"""mul_mat_id on CUDA (moe.cu): a block per (expert slot, token) and MOE_WARPS rows of the expert that slot chose, a
warp a row, so only the chosen experts' rows are read. Three implementations: `mmvq` (a quantized as; the default):
b's rows quantized to q8_1 in the temp block (quant.cu's quantize_q8_1_f32), then mul_mat's integer row dot
(quant_mmvq.cuh); `mmv`: exact, F32 accumulation, any as type moe.cu has. `grouped` (prompts, the default from
GROUPED_MIN_TOKENS tokens; moe_grouped.cu): the slots sorted by expert in the temp block by one launch (moe_sort),
then a tile GEMM a block per (at most GROUPED_TN slots of one expert, 64 rows): each expert row dequantized once a tile,
not once a slot, and a few hundred blocks instead of a block per slot and 4 rows; exact, F32 accumulation."""
from __future__ import annotations

from types import SimpleNamespace

from ....errors import UnsupportedOpError
from ....types import F32
from ..gemm_plan import align_temp
from ..registry import register
from .common import FLOATS, SUFFIX, tensor_ptr
from .quant import MAX_GRID_Y, QUANTIZE_BLOCK, mmvq_aligned

MOE_WARPS = 4           # moe.cu's rows a block
GROUPED_TN = 64                  # moe_grouped.cu's MOE_TN: slots a tile
GROUPED_MAX_EXPERTS = 1024      # its MOE_MAX_EXPERTS: moe_sort's counters in shared memory
GROUPED_MIN_TOKENS = 32         # tokens from which `grouped` is the default
QUANT = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs")   # moe.cu's


def _has_kernel(t) -> bool:
    return t in FLOATS or (t.quantized and t.name in QUANT)


def refusal(node) -> str | None:
    a, b, ids = node.src
    if not _has_kernel(a.type) or b.type != F32:
        return (f"mul_mat_id on CUDA takes as of F32, F16, BF16 or {', '.join(q.upper() for q in QUANT)} and an F32 b, "
                f"not {a.type.name} x {b.type.name}")
    if a.ne[0] % 8 or -(-a.ne[1] // MOE_WARPS) > MAX_GRID_Y or node.ne[1] * node.ne[2] >= 2 ** 31:
        return (f"mul_mat_id on CUDA takes K a multiple of 8, at most {MAX_GRID_Y * MOE_WARPS} rows a matrix; got as "
                f"ne={a.ne}, ids ne={ids.ne}")
    return None


def _grouped_fits(node) -> bool:
    return node.src[0].ne[2] <= GROUPED_MAX_EXPERTS and -(-node.ne[0] // 64) <= MAX_GRID_Y


def choose(node, backend) -> str:
    if node.ne[2] >= GROUPED_MIN_TOKENS and _grouped_fits(node):
        return "grouped"
    return "mmvq" if node.src[0].type.quantized else "mmv"


def _tiles(node) -> int:
    """An upper bound on the tiles of GROUPED_TN slots of one expert: each expert's last tile may be partial."""
    return -(-node.ne[1] * node.ne[2] // GROUPED_TN) + node.src[0].ne[2]


def temp_size(node, impl, backend) -> int:
    """b's rows as q8_1 (K int8 and K / 32 (d, d sum q) float pairs a row) for mmvq."""
    if impl == "mmvq" and not node.src[0].type.quantized:
        raise UnsupportedOpError(f"cuda: mul_mat_id '{node.name}' (as {node.src[0].type.name}) cannot run as mmvq: it "
                                 "takes a quantized as")
    if impl == "grouped" and not _grouped_fits(node):
        raise UnsupportedOpError(f"cuda: mul_mat_id '{node.name}' (as ne={node.src[0].ne}) cannot run as grouped: it "
                                 f"takes at most {GROUPED_MAX_EXPERTS} experts")
    if impl == "grouped":
        return align_temp(4 * (node.ne[1] * node.ne[2] + 3 * _tiles(node)))
    b = node.src[1]
    return align_temp(b.ne[1] * b.ne[2] * b.ne[0] * 5 // 4) if impl == "mmvq" else 0


def kernel_name(node, impl) -> str:
    return f"mm_id_{SUFFIX[node.src[0].type]}" if impl == "grouped" else f"{impl}_id_{SUFFIX[node.src[0].type]}"


def grouped_steps(backend, node) -> list:
    """moe_sort (one block: the slots by expert, the tiles) and the tile GEMM (a block per tile and 64 rows)."""
    a, b, ids = node.src
    temp, tiles = backend.temp_ptr(node), _tiles(node)
    sort = backend.launch(node, "moe_sort", tensor_ptr(node), node, [(tensor_ptr(ids), ids), (temp, ids)],
                          config=(1, 1024), ints=(a.ne[2], tiles))
    product = backend.launch(node, kernel_name(node, "grouped"), tensor_ptr(node), node, [
        (tensor_ptr(a), a), (tensor_ptr(b), b), (temp, None)], config=((tiles, -(-a.ne[1] // 64)), 256),
        ints=(node.ne[1] * node.ne[2],))
    return [sort, product]


def steps(backend, node, impl=None) -> list:
    a, b, ids = node.src
    grid = (node.ne[1] * node.ne[2], -(-a.ne[1] // MOE_WARPS))
    ints = (a.ne[2], ids.nb[0], ids.nb[1])
    extra = (tensor_ptr(ids), ids)
    if impl == "grouped":
        return grouped_steps(backend, node)
    if impl == "mmv" or not mmvq_aligned(a):
        return [backend.launch(node, f"mmv_id_{SUFFIX[a.type]}", tensor_ptr(node), node, [
            (tensor_ptr(a), a), (tensor_ptr(b), b), extra], config=(grid, 32 * MOE_WARPS), ints=ints)]
    temp, cols = backend.temp_ptr(node), b.ne[1] * b.ne[2]
    quantize = backend.launch(node, "quantize_q8_1_f32", temp, SimpleNamespace(ne=b.ne, nb=b.nb, nelements=cols * b.ne[0]),
                              [(tensor_ptr(b), b)], config=(min(-(-cols * b.ne[0] // QUANTIZE_BLOCK), 1 << 16),
                                                            QUANTIZE_BLOCK))
    product = backend.launch(node, kernel_name(node, "mmvq"), tensor_ptr(node), node, [(tensor_ptr(a), a), (temp, b), extra],
                             config=(grid, 32 * MOE_WARPS), ints=ints)
    return [quantize, product]


register(ops=("mul_mat_id",), refusal=refusal, name=kernel_name, temp_size=temp_size, steps=steps,
         impls=("mmvq", "mmv", "grouped"), choose=choose)
