"""Best-fit free-list allocator over address ranges (no memory of its own, offsets only).

Memory is a list of chunks, each at most `max_size` bytes. Each chunk's free list is sorted by offset and
its last block is the open end of the chunk. An allocation takes the smallest free block that fits; only
if none does, it grows a chunk at its end, and only if no chunk can grow, it opens a new chunk. Freed
blocks merge with their neighbours.
"""
from __future__ import annotations

from ..errors import OutOfMemoryError


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


class _Chunk:
    def __init__(self, max_size: int):
        self.free = [[0, max_size]]     # [offset, size]; the last block reaches max_size
        self.high = 0                    # high-water mark: bytes the chunk's buffer needs


class DynamicAllocator:
    def __init__(self, alignment: int, max_size: int):
        self.alignment = alignment
        self.max_size = max_size
        self.chunks: list[_Chunk] = []

    def alloc(self, size: int) -> tuple[int, int]:
        """Reserve `size` bytes (rounded up to the alignment); returns (chunk, offset)."""
        size = align_up(max(size, 1), self.alignment)
        if size > self.max_size:
            raise OutOfMemoryError(f"a block of {size} bytes does not fit the buffer type's maximum of "
                                   f"{self.max_size} bytes")
        best = None
        for ci, chunk in enumerate(self.chunks):
            for bi, (_, bsize) in enumerate(chunk.free[:-1]):
                if bsize >= size and (best is None or bsize < best[2]):
                    best = (ci, bi, bsize)
        if best is None:
            for ci, chunk in enumerate(self.chunks):
                if chunk.free[-1][1] >= size:
                    best = (ci, len(chunk.free) - 1, chunk.free[-1][1])
                    break
        if best is None:
            self.chunks.append(_Chunk(self.max_size))
            best = (len(self.chunks) - 1, 0, self.max_size)
        ci, bi, _ = best
        chunk = self.chunks[ci]
        block = chunk.free[bi]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0 and bi != len(chunk.free) - 1:
            del chunk.free[bi]
        chunk.high = max(chunk.high, offset + size)
        return ci, offset

    def free(self, chunk_index: int, offset: int, size: int):
        """Return a block given by `alloc` (same size) to its chunk's free list, merging neighbours."""
        size = align_up(max(size, 1), self.alignment)
        free = self.chunks[chunk_index].free
        i = 0
        while i < len(free) and free[i][0] < offset:
            i += 1
        free.insert(i, [offset, size])
        if i + 1 < len(free) and offset + size == free[i + 1][0]:
            free[i][1] += free[i + 1][1]
            del free[i + 1]
        if i > 0 and free[i - 1][0] + free[i - 1][1] == offset:
            free[i - 1][1] += free[i][1]
            del free[i]

    @property
    def chunk_sizes(self) -> list[int]:
        return [c.high for c in self.chunks]
