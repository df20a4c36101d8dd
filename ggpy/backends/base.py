"""The backend interface every device implements: buffer type, buffer, and the backend itself."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError


class BufferType:
    """Where a backend's memory comes from: alignment of every tensor, largest single buffer, host or not."""

    name = "abstract"
    alignment = 64
    max_size = 2 ** 62
    is_host = False

    def alloc_buffer(self, size: int) -> "Buffer":
        raise NotImplementedError


class Buffer:
    """A block of backend memory holding tensors at byte offsets."""

    def __init__(self, buffer_type: BufferType, size: int):
        self.buffer_type = buffer_type
        self.size = size

    def set_tensor(self, tensor, array: np.ndarray):
        """Write `array` (shape reversed(tensor.ne)) into the tensor's bytes."""
        raise NotImplementedError

    def get_tensor(self, tensor) -> np.ndarray:
        """A host copy of the tensor's values, shape reversed(tensor.ne)."""
        raise NotImplementedError

    def fill(self, offset: int, size: int, byte: int):
        """Set `size` bytes from `offset` to `byte` (used for guard bytes)."""
        raise NotImplementedError

    def read_bytes(self, offset: int, size: int) -> bytes:
        raise NotImplementedError


class Backend:
    """Runs planned graphs. Subclasses implement supports_op, temp_size, compute and synchronize."""

    name = "abstract"

    def __init__(self, buffer_type: BufferType):
        self.buffer_type = buffer_type

    def supports_op(self, node) -> bool:
        raise NotImplementedError

    def temp_size(self, node) -> int:
        """Scratch bytes the kernel chosen for `node` needs while it runs (0 when none)."""
        return 0

    def kernel_name(self, node) -> str:
        """Which implementation runs `node` (shown in plan dumps)."""
        return node.op

    def fused_groups(self, graph) -> list:
        """The runs of nodes (lists in graph order, views left out) that one fused kernel computes at the
        first node's turn, writing the last one's result; the planner gives each run one block."""
        return []

    def cached(self, graph, what: str, make, stamp=()):
        """make(graph), computed once per version of `graph` and `stamp` (what else the value depends on) and kept
        in its backend_cache: e.g. the fusions that both the planner's fused_groups and the plan's binding need."""
        key, now = (self, what), (graph.version, stamp)
        hit = graph.backend_cache.get(key)
        if hit is not None and hit[0] == now:
            return hit[1]
        value = make(graph)
        graph.backend_cache[key] = (now, value)
        return value

    def compute(self, graph):
        raise NotImplementedError

    def synchronize(self):
        pass

    def check_supported(self, graph):
        for node in graph.nodes:
            if not self.supports_op(node):
                srcs = ", ".join(f"{s.type.name}{list(s.ne)}" for s in node.src if s is not None)
                raise UnsupportedOpError(f"backend {self.name} cannot run node '{node.name}' op={node.op} "
                                         f"type={node.type.name} ne={node.ne} (sources: {srcs})")
