"""conv_2d through cuDNN's graph API, by NVIDIA's Python frontend (the optional package nvidia-cudnn-frontend, module
`cudnn`, imported at first use): the "cudnn" implementation of kernels/conv.py's conv_2d entry.

The kernel a ne = (KW, KH, Cin, Cout) is cuDNN's W [Cout, Cin, KH, KW], the image b ne = (W, H, Cin, N) its X
[N, Cin, H, W] and the result ne = (OW, OH, Cout, N) its Y, each with its own strides (nb in elements), so views and
permuted layouts go to cuDNN as they are. The conv runs in the operands' type when a and b share it, else in F32 (the
other operand converted into the temp block); Y is the F32 result itself, or, where cuDNN takes no F32 result for F16
or BF16 operands, a copy in their type in the temp block, converted afterwards. Math is float: engines that convert
inputs down or reduce in lower precision are deselected, and so are TF32 tensor-core engines for F32 operands.

A plan is built once per process and key (device, types, shapes, strides, parameters, TF32), and so is a refusal
(any exception of the frontend while building: the reason is kept, see `refusal`). The registry's accepts and
temp_size know no backend, hence not CUDABackend(allow_tf32): a node is accepted when its plan without TF32 builds,
and for F32 operands temp_size also builds the TF32 plan and reserves the larger of the two workspaces; steps(),
which knows the backend, runs the TF32 plan where it is allowed and built.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ...errors import CudaError
from ...types import BF16, F16, F32
from .kernels.common import SUFFIX, tensor_ptr
from .gemm_plan import align_temp, contiguous

ALIGN = 16                  # the byte alignment cuDNN's plans assume of every pointer
_FRONTEND: list = []        # [the cudnn module, or None where it is missing or does not load], once tried
_HANDLES: dict = {}         # device ordinal -> cudnn.Handle
_PLANS: dict = {}           # key -> Plan, or the reason no plan was built


@dataclass
class Plan:
    graph: object           # the built cudnn.pygraph
    x: object               # its image, kernel and result tensors
    w: object
    y: object
    handle: object
    workspace: int          # bytes
    ctype: object           # the type the conv runs in
    y_temp: bool            # Y in ctype in the temp block, copied to the F32 result after


def frontend():
    """The cudnn module, or None where it is not installed or libcudnn does not load (tried once)."""
    if not _FRONTEND:
        try:
            cudnn = importlib.import_module("cudnn")            # lazily: `import ggpy` imports no cudnn
            cudnn.backend_version()
        except Exception:  # noqa: BLE001 - missing package or library: no cuDNN candidate
            cudnn = None
        _FRONTEND.append(cudnn)
    return _FRONTEND[0]


def _device() -> int | None:
    """The ordinal of the current context's device (None: no context)."""
    driver = importlib.import_module("cuda.bindings.driver")
    err, dev = driver.cuCtxGetDevice()
    return int(dev) if err == driver.CUresult.CUDA_SUCCESS else None


def _geom(t) -> dict:
    """cuDNN's dim and stride (elements, outermost first) of a ggml layout t (ne, nb in bytes, type)."""
    if any(nb % t.type.size for nb in t.nb):
        raise ValueError(f"strides {t.nb} are not whole {t.type.name} elements")
    return {"dim": list(reversed(t.ne)), "stride": [nb // t.type.size for nb in reversed(t.nb)]}


def _build(cu, dev: int, node, ctype, y_type, tf32: bool) -> Plan:
    if dev not in _HANDLES:
        _HANDLES[dev] = cu.create_handle()         # on the current context's device
    handle, dt = _HANDLES[dev], {F32: cu.data_type.FLOAT, F16: cu.data_type.HALF, BF16: cu.data_type.BFLOAT16}
    a, b = node.src[:2]
    g = cu.pygraph(io_data_type=dt[ctype], intermediate_data_type=dt[F32], compute_data_type=dt[F32], handle=handle)
    x = g.tensor(name="X", data_type=dt[ctype], **_geom(b if b.type == ctype else contiguous(b, ctype)))
    w = g.tensor(name="W", data_type=dt[ctype], **_geom(a if a.type == ctype else contiguous(a, ctype)))
    p = node.op_params
    y = g.conv_fprop(image=x, weight=w, padding=[p["p1"], p["p0"]], stride=[p["s1"], p["s0"]],
                     dilation=[p["d1"], p["d0"]], compute_data_type=dt[F32])
    out = _geom(node if y_type == F32 else contiguous(node, ctype))
    y.set_output(True).set_data_type(dt[y_type]).set_dim(out["dim"]).set_stride(out["stride"])
    notes = cu.numerical_note
    g.deselect_numeric_notes([notes.DOWN_CONVERT_INPUTS, notes.REDUCED_PRECISION_REDUCTION]
                             + ([notes.TENSOR_CORE] if ctype == F32 and not tf32 else []))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cu.heur_mode.A, cu.heur_mode.FALLBACK])
    errors = []
    for i in range(g.get_execution_plan_count()):       # the heuristics' order; a deselected plan raises too
        try:
            g.build_plan_at_index(i)
            return Plan(g, x, w, y, handle, g.get_workspace_size(), ctype, y_type != F32)
        except Exception as e:  # noqa: BLE001 - this plan declines: try the next
            errors.append(e)
    raise RuntimeError(f"none of {len(errors)} plans builds" + (f"; the last: {errors[-1]}" if errors else ""))


def _lookup(node, tf32: bool = False):
    """node's Plan, or why there is none."""
    cu = frontend()
    if cu is None:
        return "cuDNN's Python frontend (nvidia-cudnn-frontend) is not installed or libcudnn does not load"
    dev = _device()
    if dev is None:
        return "no current CUDA context"
    a, b = node.src[:2]
    key = (dev, tf32, tuple(node.ne), tuple(node.nb), tuple(sorted(node.op_params.items())),
           *((t.type.name, tuple(t.ne), tuple(t.nb)) for t in (a, b)))
    if key not in _PLANS:
        ctype, reasons = a.type if a.type == b.type else F32, []
        for y_type in dict.fromkeys((F32, ctype)):
            try:
                _PLANS[key] = _build(cu, dev, node, ctype, y_type, tf32)
                break
            except Exception as e:  # noqa: BLE001 - cuDNN refuses the shape (CUDNN_STATUS_BAD_PARAM, ...)
                reasons.append(f"{y_type.name} result: {type(e).__name__}: {e}")
        else:
            _PLANS[key] = "cuDNN refuses it (" + "; ".join(reasons) + ")"
    return _PLANS[key]


def _aligned(node) -> bool:
    return all((t.view_offs if t.view_src is not None else 0) % ALIGN == 0 for t in (*node.src[:2], node))


def refusal(node) -> str | None:
    """Why cuDNN does not run the conv_2d `node` (None: it does)."""
    if not _aligned(node):
        return f"a view not {ALIGN}-byte aligned"
    got = _lookup(node)
    return None if isinstance(got, Plan) else got


def accepts(node) -> bool:
    return refusal(node) is None


def _parts(node, plan: Plan) -> tuple[list, int]:
    """([(0 a | 1 b | 2 y, layout, temp offset)] of the copies in the temp block, after the workspace; its bytes)."""
    parts = [(i, contiguous(t, plan.ctype)) for i, t in enumerate(node.src[:2]) if t.type != plan.ctype]
    parts += [(2, contiguous(node, plan.ctype))] if plan.y_temp else []
    offset, out = align_temp(plan.workspace), []
    for i, lay in parts:
        out.append((i, lay, offset))
        offset += align_temp(lay.nbytes)
    return out, offset


def _plans(node) -> list:
    """An accepted node's plans: without TF32, and with it where the conv runs in F32 and that plan builds."""
    plan = _lookup(node)
    fast = _lookup(node, True) if plan.ctype == F32 else None
    return [plan] + ([fast] if isinstance(fast, Plan) else [])


def temp_size(node) -> int:
    """The temp bytes of an accepted node: cuDNN's workspace (the larger of both plans') and the copies."""
    return max(_parts(node, p)[1] for p in _plans(node))


class Execute:
    """The step that runs a plan on the stream it is called with (pointers of x, w, y and the workspace fixed);
    a failure raises CudaError (a failed candidate to the autotune, a failed capture to CUDA graphs)."""

    def __init__(self, node, name: str, plan: Plan, x: int, w: int, y: int, workspace: int):
        self.node, self.name, self.plan = node, name, plan
        self.pack = {plan.x: x, plan.w: w, plan.y: y}
        self.workspace = workspace if plan.workspace else None

    def __call__(self, stream):
        try:
            frontend().set_stream(self.plan.handle, int(stream.handle))
            self.plan.graph.execute(self.pack, self.workspace, handle=self.plan.handle)
        except Exception as e:  # noqa: BLE001 - the frontend raises RuntimeError, ValueError, ...
            raise CudaError(f"cuDNN conv_2d of node '{self.node.name}' failed: {type(e).__name__}: {e}") from None


def steps(backend, node) -> list:
    """An accepted node's steps: operands converted into the temp block where needed, the plan's execution on
    backend.stream, Y converted into the result where it went to the temp block."""
    plans = _plans(node)
    plan, tf32 = (plans[1], "_tf32") if backend.allow_tf32 and len(plans) > 1 else (plans[0], "")
    a, b = node.src[:2]
    parts, size = _parts(node, plan)
    temp = backend.temp_ptr(node) if size else 0
    ptrs, out, after = [tensor_ptr(a), tensor_ptr(b), tensor_ptr(node)], [], []
    if any(p % ALIGN for p in ptrs):
        return [backend.launch_node(node)]      # a misaligned address after all: the implicit GEMM (no temp)
    for i, lay, offset in parts:
        if i < 2:
            out.append(backend.launch(node, f"copy_{SUFFIX[node.src[i].type]}_{SUFFIX[plan.ctype]}", temp + offset,
                                      lay, [(ptrs[i], node.src[i])]))
        else:
            after.append(backend.launch(node, f"copy_{SUFFIX[plan.ctype]}_f32", ptrs[2], node, [(temp + offset, lay)]))
        ptrs[i] = temp + offset
    name = f"cudnn_conv_{SUFFIX[a.type]}_{SUFFIX[b.type]}{tf32}"
    return out + [Execute(node, name, plan, ptrs[1], ptrs[0], ptrs[2], temp)] + after
