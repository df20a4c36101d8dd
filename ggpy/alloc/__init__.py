"""Memory planning: the graph allocator and its temp heap."""
from .dynamic import DynamicAllocator
from .graph_allocator import GraphAllocator
from .plan import Plan
from .tensor_alloc import alloc_ctx_tensors

__all__ = ["GraphAllocator", "DynamicAllocator", "Plan", "alloc_ctx_tensors"]
