"""Placing tensors that outlive graphs (weights) in a buffer of their own (ggml_backend_alloc_ctx_tensors)."""
from __future__ import annotations

from ..errors import OutOfMemoryError
from .dynamic import align_up


def alloc_ctx_tensors(ctx, backend):
    """Give every leaf of `ctx` that has no memory yet (no op, not a view) a place in one new buffer of
    `backend`'s buffer type, and return that buffer. Graph allocators leave these tensors where they are,
    so their values survive any re-planning."""
    return alloc_tensors([t for t in ctx.tensors if t.op is None and t.view_src is None and t.buffer is None],
                         backend)


def alloc_tensors(tensors, backend):
    """Place `tensors` one after another (aligned) in one new buffer of `backend`'s buffer type; the buffer."""
    btype = backend.buffer_type
    offsets, size = [], 0
    for t in tensors:
        offsets.append(size)
        size += align_up(max(t.nbytes, 1), btype.alignment)
    if size > btype.max_size:
        raise OutOfMemoryError(f"{len(tensors)} tensors need {size} bytes, more than the {btype.name} buffer type's "
                               f"maximum of {btype.max_size}")
    buffer = btype.alloc_buffer(max(size, btype.alignment))
    for t, offset in zip(tensors, offsets):
        t.buffer, t.offset = buffer, offset
    return buffer
