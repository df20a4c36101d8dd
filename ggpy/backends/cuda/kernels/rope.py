"""rope (ggml_rope_ext): one thread per pair of a row (normal (2j, 2j+1), NEOX (j, j + n_dims/2)), threads past the
rotated pairs copy two values; the angle and its cos/sin in double as the CPU's; F32, F16, BF16, any strides. It
may run in place: a thread reads its pair before writing it, and no two threads share a value. A rope whose rows go
on to set_rows (the rope_set_rows pattern of ggpy/graph/fusion.py: the KV cache write) writes them straight into the
cache's rows (rope_set_rows_<a>_<cache>); with the q rope before it and v's set_rows at the same indices (the
rope_kv pattern), one launch does all three (rope_kv_<cache>)."""
from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

from ....ops.rope import yarn_corr_dims, yarn_mscale
from ....types import F32, I32
from ...kernel import Fused
from ..registry import register
from .common import BLOCK, FLOATS, MAX_BLOCKS, SUFFIX, Args, apart, extent, pack_args, tensor_ptr


class RowsArgs(ctypes.Structure):
    """rope.cu's RowsArgs: the Args, then the row indices (address, byte stride) and the cache's row count."""

    _fields_ = [("a", Args), ("idx", ctypes.c_void_p), ("idx_nb", ctypes.c_int64), ("rows", ctypes.c_int64)]


class KvArgs(ctypes.Structure):
    """rope.cu's KvArgs: the q rope's Args, the k rope's RowsArgs, v's set_rows Args (src0 v, dst the V cache)."""

    _fields_ = [("q", Args), ("k", RowsArgs), ("v", Args)]


def _bits(v: float) -> int:
    """The float32 bits of v as a signed int (Args.ip)."""
    return struct.unpack("<i", struct.pack("<f", v))[0]


def refusal(node) -> str | None:
    a, b = node.src[:2]
    c = node.src[2] if len(node.src) > 2 else None
    if a.type not in FLOATS or node.type != a.type or b.type != I32 or (c is not None and c.type != F32):
        return "rope on CUDA takes F32/F16/BF16 a (result of its type), I32 positions and F32 frequency factors"
    return None


def _grid(*nodes, extra: int = 0) -> tuple:
    """(grid, block) of a thread per pair of the ropes `nodes` (and `extra` more threads)."""
    units = sum((n.ne[0] + 1) // 2 * n.ne[1] * n.ne[2] * n.ne[3] for n in nodes) + extra
    return min(MAX_BLOCKS, -(-units // BLOCK)), BLOCK


def _rope_args(node, dst_ptr, dst) -> Args:
    """Args of the rope writing `dst` (a layout of the rope's ne) at dst_ptr: the frequency factors' address as
    Args.src2."""
    p = node.op_params
    low, high = yarn_corr_dims(p)
    srcs = [(tensor_ptr(s), s) for s in node.src]
    ints = (p["n_dims"], _bits(p["ext_factor"]), _bits(yarn_mscale(p)), _bits(low), _bits(high))
    return pack_args(dst_ptr, dst, srcs, (p["freq_base"], p["freq_scale"]), int(p["mode"] == 2), ints)


def rope_steps(backend, node, impl=None) -> list:
    return [backend.launch_struct(node, f"rope_{SUFFIX[node.type]}", *_grid(node), _rope_args(node, tensor_ptr(node), node))]


def rope_set_rows_accepts(f) -> bool:
    """Float rows into a float cache of one matrix (ne (hd * heads, rows))."""
    c = f.last
    return f.head.type in FLOATS and c.type in FLOATS and c.ne[2] == c.ne[3] == 1 and f.head.nelements > 0


def _rows_args(backend, f) -> RowsArgs | None:
    """The RowsArgs of a rope_set_rows where everything is on this GPU and the cache lies clear of the rope's sources
    and the indices."""
    rope, cache = f.head, f.last
    srcs = [s for s in rope.src if s is not None] + [f.idx]
    if not backend.on_device(cache, *srcs) or not apart(cache, [extent(s) for s in srcs]):
        return None
    hd = rope.ne[0]
    rows = SimpleNamespace(ne=rope.ne, nb=(cache.nb[0], hd * cache.nb[0], cache.nb[1], 0), nelements=rope.nelements)
    return RowsArgs(_rope_args(rope, tensor_ptr(cache), rows), tensor_ptr(f.idx), f.idx.nb[0], cache.ne[1])


def rope_set_rows_run(backend, f) -> list | None:
    """rope_set_rows writing token t's rotated rows into row idx[t] of the cache (set_rows' memory)."""
    rope, args = f.head, _rows_args(backend, f)
    if args is None:
        return None
    launch = backend.launch_struct(rope, f"rope_set_rows_{SUFFIX[rope.type]}_{SUFFIX[f.last.type]}", *_grid(rope), args)
    launch.name = f.name(f"rope_{SUFFIX[rope.type]}")
    return [launch]


def rope_kv_accepts(f) -> bool:
    """F32 q and k ropes and v rows (ne (X, n)), both caches of one float type, one matrix each."""
    kc, vc, v = f.k.last, f.v_store, f.v_store.src[0]
    return (f.head.type == v.type == F32 and rope_set_rows_accepts(f.k) and vc.type == kc.type
            and vc.ne[2] == vc.ne[3] == v.ne[2] == v.ne[3] == 1)


def kv_args(backend, f) -> KvArgs | None:
    """The KvArgs of a rope_kv where all is on this GPU and what it writes lies clear of what it reads (but the q rope
    over its source, as the planner may put it)."""
    q, vc, v, args = f.head, f.v_store, f.v_store.src[0], _rows_args(backend, f.k)
    reads = [t for t in (*q.src, f.k.head.src[0], f.k.idx, v) if t is not None]
    if (args is None or not backend.on_device(q, vc, *reads) or not apart(q, [extent(t) for t in reads[1:]])
            or not all(apart(c, [extent(t) for t in reads + [q]]) for c in (f.k.last, vc))):
        return None
    return KvArgs(_rope_args(q, tensor_ptr(q), q), args, pack_args(tensor_ptr(vc), vc, [(tensor_ptr(v), v)]))


def rope_kv_run(backend, f) -> list | None:
    """One launch (rope_kv_<cache>): the q rope into its memory, the k rope into the K cache's rows and v's rows into
    the V cache's at the same indices, where kv_args allows."""
    q, vc, kv = f.head, f.v_store, kv_args(backend, f)
    if kv is None:
        return None
    launch = backend.launch_struct(q, f"rope_kv_{SUFFIX[vc.type]}", *_grid(q, f.k.head, extra=vc.src[0].nelements), kv)
    launch.name = f.name(f"rope_{SUFFIX[q.type]}")
    return [launch]


register(ops=("rope",), refusal=refusal, name=lambda node, impl: f"rope_{SUFFIX[node.type]}",
         steps=rope_steps, fuses={"rope_set_rows": Fused(rope_set_rows_run, accepts=rope_set_rows_accepts),
                                  "rope_kv": Fused(rope_kv_run, accepts=rope_kv_accepts)})
