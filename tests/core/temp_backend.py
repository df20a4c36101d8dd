"""A CPU backend for allocator tests: it asks for scratch on every node and poisons it before each run."""
import ggpy


class TempBackend(ggpy.CPUBackend):
    """A CPU backend that asks for scratch on every node (at least what the real kernel needs) and, right
    before each kernel runs, scribbles 0xFF (NaN) over its temp block: a live tensor placed in it shows.
    No fusion: every node runs (and holds its scratch) on its own."""

    def __init__(self, size_of, buffer_type=None):
        super().__init__(n_threads=2, buffer_type=buffer_type, fuse=False)
        self.size_of = size_of

    def temp_size(self, node) -> int:
        return max(super().temp_size(node), int(self.size_of(node)))

    def _bind(self, node):
        run = super()._bind(node)
        if run is None or node.temp is None:
            return run
        buf, off, size = node.temp
        scratch = buf.data[off:off + size]

        def scribble_then_run():
            scratch.fill(0xFF)
            run()
        return scribble_then_run
