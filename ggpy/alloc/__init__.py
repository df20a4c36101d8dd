"""Memory planning: the graph allocator and its temp heap."""
from .dynamic import DynamicAllocator
from .graph_allocator import GraphAllocator
from .plan import Plan

__all__ = ["GraphAllocator", "DynamicAllocator", "Plan"]
