"""norm, rms_norm (one block per row; short LayerNorm rows with their affine one warp per row) and group_norm
(one block per (group, batch), sums in double, two passes as the CPU and the reference); F32 and F16, sources
with any strides. A norm followed by mul(weight) and add(bias) runs fused as norm_affine (the norm_affine pattern of
ggpy/graph/fusion.py), an add followed by the rms_norm of its sum [and the mul by the norm's weight] as add_rms_norm
[_mul] (its add_rms_norm pattern), an rms_norm and that mul as rms_norm_mul (its rms_norm_mul pattern); its products
as norm_mat_vec and norm_rope_kv (kernels/matmul.py)."""
from __future__ import annotations

import ctypes

from ....types import F32
from ...kernel import Fused
from ..registry import register
from . import matmul
from .common import FLOATS, SUFFIX, Args, apart, extent, pack_args, row_launch, rows, tensor_ptr, vector_rows
from .epilogue import act_id

NORM_WARP_MAX = 32 * 16             # LayerNorm rows up to this long: one warp per row (norm_affine_warp)
NORM_WARP_BLOCK = 128
NORM_VEC_MAX = 128 * 4              # rows up to this long, contiguous, a multiple of 4: norm_affine_vec
GROUP_BLOCK = 256


class WeightArgs(ctypes.Structure):
    """norm.cuh's WeightArgs: the Args and the address of the weight row a fused kernel scales by."""

    _fields_ = [("a", Args), ("w", ctypes.c_void_p)]


def refusal(node) -> str | None:
    x = node.src[0]
    if x.type not in FLOATS or node.type != x.type:
        return f"{node.op} on CUDA takes F32/F16 with a result of the same type; got {x.type.name} -> {node.type.name}"
    if node.op == "group_norm" and (x.ne[3] >= 65536 or node.op_params["n_groups"] >= 2 ** 31):
        return "group_norm on CUDA takes fewer than 65536 images and 2^31 groups"
    if rows(node) >= 2 ** 31:
        return f"{node.op} on CUDA takes fewer than 2^31 rows"
    return None


def kernel_name(node, impl=None) -> str:
    return f"{node.op}_{SUFFIX[node.src[0].type]}"


def params(node) -> tuple:
    if node.op == "group_norm":
        c, g = node.src[0].ne[2], node.op_params["n_groups"]
        return ((c + g - 1) // g, node.op_params["eps"])
    return (node.op_params["eps"],)


def launch_config(node) -> tuple:
    """group_norm: one block per (group, image); norm, rms_norm: one block per row, threads by row length."""
    if node.op == "group_norm":
        return (node.op_params["n_groups"], node.src[0].ne[3]), GROUP_BLOCK
    return row_launch(node)


def norm_affine_steps(backend, node, fused) -> list:
    """A norm with its affine (a fused Epilogue: scale and bias row vectors of the norm's type, optionally an
    activation) as one row kernel writing the last node's memory (the add's or the activation's)."""
    add = fused.last
    x = node.src[0]
    n = x.ne[0]
    block = 32 if n <= 256 else 128 if n <= 1024 else 256
    config, name = (rows(node), block), f"norm_affine_{SUFFIX[x.type]}"
    if n <= NORM_WARP_MAX and all(abs(nb) * k < 1 << 31 for t in (x, add) for k, nb in zip(t.ne, t.nb)):
        config, name = (-(-rows(node) // (NORM_WARP_BLOCK // 32)), NORM_WARP_BLOCK), f"norm_affine_warp_{SUFFIX[x.type]}"
        ptrs, align = [tensor_ptr(t) for t in (x, add, fused.scale, fused.bias)], x.type.size * 4
        if n <= NORM_VEC_MAX and n % 4 == 0 and vector_rows(x, ptrs, align) and vector_rows(add, (), align):
            name = f"norm_affine_vec_{SUFFIX[x.type]}"
    srcs = [(tensor_ptr(x), x), (tensor_ptr(fused.scale), fused.scale), (tensor_ptr(fused.bias), fused.bias)]
    launch = backend.launch(node, name, tensor_ptr(add), add, srcs, params(node), config, act_id(fused))
    launch.name = fused.name(launch.name)
    return [launch]


def norm_affine_accepts(f) -> bool:
    """Weight and bias of the norm's type."""
    return f.head.nelements > 0 and f.scale.type == f.add_node.type == f.bias.type


def norm_affine_run(backend, f) -> list | None:
    """norm_affine_steps where the plan's memory allows: everything on this GPU, the bias 16-byte aligned, the result
    clear of weight and bias, and of the norm's source unless exactly over it (each row is read first)."""
    x, out = f.head.src[0], f.last
    if not backend.on_device(f.head, out, f.scale, f.bias, x) or tensor_ptr(f.bias) % 16:
        return None
    same = extent(x)[0] == extent(out)[0] and x.nb == out.nb and x.type == out.type
    if not apart(out, [extent(t) for t in [f.scale, f.bias] + ([] if same else [x])]):
        return None
    return norm_affine_steps(backend, f.head, f)


def add_rms_norm_accepts(f) -> bool:
    """F32 operands, sum and norm of one shape, the sum laid out as the norm (both planned contiguous); the mul by the
    weight (when found) F32 in the norm's layout, the weight contiguous."""
    s, n = f.head, f.norm
    ok = all(t.type == F32 for t in (s, n, *s.src[:2])) and s.nb == n.nb and s.nelements > 0
    return ok and (f.mul is None or (f.mul.type == f.weight.type == F32 and f.mul.nb == n.nb
                                     and f.weight.is_contiguous()))


def _clear_or_over(out, tensors) -> bool:
    """Whether out's memory is clear of each tensor's or exactly over it in the same layout."""
    lo, hi = extent(out)
    return all(b <= lo or hi <= a or ((a, b) == (lo, hi) and t.nb == out.nb and t.type == out.type)
               for t in tensors for a, b in [extent(t)])


def _weighted(backend, node, name, out, srcs, norm, w):
    """A launch (a step of `node`) of a WeightArgs kernel on the norm's rows: Args for `out`, srcs and the norm's eps,
    and the weight's address."""
    args = WeightArgs(pack_args(tensor_ptr(out), out, srcs, params(norm)), tensor_ptr(w))
    config = row_launch(norm)
    return backend.launch_struct(node, name, *config, args)


def add_rms_norm_run(backend, f) -> list | None:
    """add_rms_norm_f32 [_mul_f32] (one block per row, as rms_norm's) writing the sum and the (scaled) norm, where
    everything is on this GPU, each of the two results lies clear of, or exactly over, what it is computed from, and
    the result clear of the weight."""
    s, n, out = f.head, f.norm, f.last
    a, b = s.src[:2]
    w = [] if f.mul is None else [f.weight]
    if not backend.on_device(s, out, a, b, *w) or not (_clear_or_over(out, (a, b, s)) and _clear_or_over(s, (a, b))):
        return None
    srcs = [(tensor_ptr(a), a), (tensor_ptr(b), b), (tensor_ptr(s), s)]
    if f.mul is None:
        return [backend.launch(s, "add_rms_norm_f32", tensor_ptr(n), n, srcs, params(n), row_launch(n))]
    if not apart(out, [extent(f.weight)]):
        return None
    return [_weighted(backend, s, "add_rms_norm_mul_f32", out, srcs, n, f.weight)]


def rms_norm_mul_accepts(f) -> bool:
    """The norm, its source, the mul and the weight of one type, the weight contiguous."""
    x = f.norm.src[0]
    return (x.type == f.norm.type == f.mul.type == f.weight.type and f.mul.ne == f.norm.ne
            and f.weight.is_contiguous() and f.norm.nelements > 0)


def rms_norm_mul_run(backend, f) -> list | None:
    """rms_norm_mul (one block per row) writing the mul's memory, where everything is on this GPU and the result lies
    clear of the weight and clear of, or exactly over, the norm's source."""
    x, out = f.norm.src[0], f.mul
    if not backend.on_device(x, out, f.weight) or not (_clear_or_over(out, (x,)) and apart(out, [extent(f.weight)])):
        return None
    return [_weighted(backend, f.norm, f"rms_norm_mul_{SUFFIX[x.type]}", out, [(tensor_ptr(x), x)], f.norm, f.weight)]


register(ops=("norm", "rms_norm", "group_norm"), refusal=refusal, name=kernel_name,
         params=params, launch_config=launch_config,
         fuses={"norm_affine": Fused(norm_affine_run, accepts=norm_affine_accepts, act=True),
                "add_rms_norm": Fused(add_rms_norm_run, accepts=add_rms_norm_accepts, scale=True),
                "norm_rope_kv": Fused(matmul.norm_rope_kv_run, accepts=matmul.norm_rope_kv_accepts),
                "norm_mat_vec": Fused(matmul.norm_mat_vec_run, accepts=matmul.norm_mat_vec_accepts),
                "rms_norm_mul": Fused(rms_norm_mul_run, accepts=rms_norm_mul_accepts)})
