"""SAM's window and relative-position ops: win_part / win_unpart (one thread per dst element, 32-bit index math
where the tensors fit), get_rel_pos (grid-stride) and add_rel_pos, which reads three tensors: its kernel takes the
usual Args (a, pw) and ph's address as a second kernel argument. F32 and F16, sources with any strides."""
from __future__ import annotations

import ctypes

from ..registry import register
from .common import BLOCK, FLOATS, MAX_BLOCKS, SUFFIX, iparam32, tensor_ptr, vector_rows


def refusal(node) -> str | None:
    srcs = [s for s in node.src if s is not None]
    if any(s.type not in FLOATS for s in srcs) or node.type != srcs[0].type:
        return f"{node.op} on CUDA takes F32/F16 tensors with a result of the source's type"
    if node.op == "add_rel_pos":
        pw, ph = node.src[1], node.src[2]
        if pw.type != ph.type or pw.nb != ph.nb:
            return "add_rel_pos on CUDA needs pw and ph of one type and with the same strides"
    return None


def kernel_name(node, impl=None) -> str:
    t = SUFFIX[node.src[0].type]
    if node.op == "add_rel_pos":
        return f"add_rel_pos_{t}_{SUFFIX[node.src[1].type]}"
    return f"{node.op}_{t}"


def _win_vec(node, ptrs) -> bool:
    """Whether win_vec moves node (win_part / win_unpart) four channels a thread."""
    src, es = node.src[0], node.type.size
    win, image = (node, src) if node.op == "win_part" else (src, node)
    return (node.ne[0] % 4 == 0 and win.is_contiguous() and vector_rows(image, ptrs, 4 * es)
            and max(node.nbytes, src.nbytes) < 1 << 31)


def win_steps(backend, node, impl=None) -> list:
    """win_part / win_unpart: win_vec where it applies, else the one-element-a-thread kernel."""
    src = node.src[0]
    pd, ps = tensor_ptr(node), tensor_ptr(src)
    if not _win_vec(node, (pd, ps)):
        return [backend.launch_node(node)]
    n4 = max(node.nelements, src.nelements) // 4
    return [backend.launch(node, f"{node.op}_v_{SUFFIX[node.type]}", pd, node, [(ps, src)],
                           config=(min(MAX_BLOCKS, -(-n4 // BLOCK)), BLOCK))]


def add_rel_pos_steps(backend, node, impl=None) -> list:
    """One launch with ph's address as the kernel's second argument."""
    a, pw, ph = node.src[:3]
    launch = backend.launch(node, kernel_name(node), tensor_ptr(node), node, [(tensor_ptr(a), a), (tensor_ptr(pw), pw)])
    extra = ctypes.c_void_p(tensor_ptr(ph))
    launch.args = (launch.args, extra)
    launch.params = (ctypes.c_void_p * 2)(ctypes.addressof(launch.args[0]), ctypes.addressof(extra))
    return [launch]


register(ops=("win_part", "win_unpart"), refusal=refusal, name=kernel_name, iparam=iparam32,
         steps=win_steps)
register(ops=("get_rel_pos",), refusal=refusal, name=kernel_name)
register(ops=("add_rel_pos",), refusal=refusal, name=kernel_name,
         steps=add_rel_pos_steps)
