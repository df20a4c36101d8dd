"""argmax, top_k (k <= MAX_K) and argsort (rows of at most CHUNK: top_k of the whole row) on CUDA, in passes over
chunks of CHUNK elements of each row (topk.cu): a pass keeps the best k keys of every chunk of its rows in the temp
block, the next pass takes those as its rows, until one chunk a row remains, whose pass writes the indices: argmax
over 128256 takes two passes, top_k three (k = 40) or four (k = 256 over 151936). Every pass has a block per (row,
chunk), so a long row spreads over the GPU."""
from __future__ import annotations

from ....types import I32
from ..registry import register
from .common import FLOATS, SUFFIX, rows, tensor_ptr

CHUNK = 2048            # TOPK_CHUNK of topk.cu: a block's elements (top_k: sorted in 16 KiB of shared memory)
MAX_K = 256
KEY_BYTES = 8
ALIGN = 256


def k_of(node) -> int:
    return node.op_params["k"] if node.op == "top_k" else node.ne[0] if node.op == "argsort" else 1


def counts(node) -> list[int]:
    """The elements of a row each pass takes: the row, then the keys kept from its chunks, down to one chunk."""
    out = [node.src[0].ne[0]]
    while out[-1] > CHUNK:
        out.append(-(-out[-1] // CHUNK) * k_of(node))
    return out


def _kept(node, count: int) -> int:
    """Bytes of the keys a pass over rows of `count` elements keeps."""
    return rows(node) * -(-count // CHUNK) * k_of(node) * KEY_BYTES


def _halves(node) -> tuple[int, int]:
    """Bytes of the two halves of the temp block the passes but the last write alternately."""
    kept = [_kept(node, c) for c in counts(node)[:-1]]
    return max(kept[0::2], default=0), max(kept[1::2], default=0)


def refusal(node) -> str | None:
    x = node.src[0]
    if x.type not in FLOATS or node.type != I32:
        return f"{node.op} on CUDA takes an F32/F16/BF16 source; got {x.type.name} -> {node.type.name}"
    if node.op == "argsort" and x.ne[0] > CHUNK:
        return f"argsort on CUDA takes rows of at most {CHUNK} elements (one block's sort); got ne={x.ne}"
    if node.op == "top_k" and k_of(node) > MAX_K:
        return f"top_k on CUDA takes k <= {MAX_K}; got k = {k_of(node)}"
    if x.ne[0] >= 2 ** 31 or rows(node) >= 2 ** 31 or -(-x.ne[0] // CHUNK) >= 2 ** 16:
        return f"{node.op} on CUDA takes rows of fewer than {CHUNK * 2 ** 16} elements, fewer than 2^31 rows"
    return None


def temp_size(node, impl, backend) -> int:
    first, second = _halves(node)
    return -(-first // ALIGN) * ALIGN + second


def kernel_name(node, impl=None) -> str:
    """argsort runs as top_k of a whole row (k = n, one pass), its keys ascending where it sorts so."""
    return f"{'top_k' if node.op == 'argsort' else node.op}_{SUFFIX[node.src[0].type]}"


def sort_size(count: int) -> int:
    """The keys a block of a pass over rows of `count` elements sorts: a chunk, or the power of two (at least 2) that
    holds the row when it is shorter."""
    return CHUNK if count >= CHUNK else max(2, 1 << (count - 1).bit_length())


def steps(backend, node, impl=None) -> list:
    """One launch a pass: grid (rows, chunks), a thread per pair of the sort (at least a warp); the first reads the
    source, the others the keys the previous pass kept, in the temp block's halves by turns."""
    x, k = node.src[0], k_of(node)
    passes = counts(node)
    temp = backend.temp_ptr(node) if len(passes) > 1 else 0
    halves = (temp, temp + -(-_halves(node)[0] // ALIGN) * ALIGN)
    out = []
    for p, count in enumerate(passes):
        last = p == len(passes) - 1
        name = kernel_name(node) if p == 0 else f"{node.op}_keys"
        src = [(tensor_ptr(x), x)] if p == 0 else [(halves[(p - 1) % 2], x)]
        dst = tensor_ptr(node) if last else halves[p % 2]
        size = sort_size(count)
        out.append(backend.launch(node, name, dst, node, src, (), ((rows(node), -(-count // CHUNK)), max(32, size // 2)),
                                  int(last), (k, count, size, int(node.op == "argsort" and not node.op_params["desc"]))))
    return out


register(ops=("argmax", "top_k", "argsort"), refusal=refusal, name=kernel_name, temp_size=temp_size, steps=steps)
