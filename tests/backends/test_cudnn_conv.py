"""The cudnn conv_2d candidate without a GPU: no frontend, no candidate (and importing ggpy imports no cudnn); with a
stand-in of the frontend's pygraph API, the ggml -> cuDNN mapping (dims, element strides of views, H-first padding,
stride and dilation), the conv type of mixed operands, the TF32 and precision filters, plan caching (refusals too)
and the steps. tests/backends/test_cuda_cudnn.py runs the real thing on a GPU."""
from __future__ import annotations

import enum
import subprocess
import sys
from types import SimpleNamespace

import pytest

import ggpy
from ggpy.backends.cuda import cudnn_conv
from ggpy.backends.cuda.kernels import conv as conv_kernels
from ggpy.backends.cuda.registry import KERNELS

ENTRY = KERNELS["conv_2d"]
Types = enum.Enum("Types", "FLOAT HALF BFLOAT16")
Notes = enum.Enum("Notes", "TENSOR_CORE DOWN_CONVERT_INPUTS REDUCED_PRECISION_REDUCTION")


class T:
    """A frontend tensor (hashable by identity, as cudnn's are); its setters return it."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __getattr__(self, name):            # set_output, set_data_type, set_dim, set_stride
        return lambda value: self.__dict__.update({name[4:]: value}) or self


class Graph:
    """pygraph's calls as cudnn_conv makes them; refuses a F32 result of half operands (as cuDNN's NCHW engines)."""
    builds = 0

    def __init__(self, io_data_type, intermediate_data_type, compute_data_type, handle):
        self.io, self.notes = io_data_type, []

    def tensor(self, dim, stride, data_type, name):
        return T(dim=dim, stride=stride, data_type=data_type, name=name)

    def conv_fprop(self, image, weight, padding, stride, dilation, compute_data_type):
        self.params, self.y = (padding, stride, dilation), T(name="Y")
        return self.y

    def deselect_numeric_notes(self, notes):
        self.notes += notes

    def validate(self):
        Graph.builds += 1
        if self.io != Types.FLOAT and self.y.data_type == Types.FLOAT:
            raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")

    def build_operation_graph(self):
        pass

    def create_execution_plans(self, modes):
        pass

    def get_execution_plan_count(self):
        return 2

    def build_plan_at_index(self, i):
        if i == 0:
            raise RuntimeError("Deselecting execution plan")

    def get_workspace_size(self):
        return 1000 if Notes.TENSOR_CORE in self.notes else 3000


FAKE = SimpleNamespace(pygraph=Graph, data_type=Types, numerical_note=Notes, create_handle=object,
                       heur_mode=SimpleNamespace(A=0, FALLBACK=1))


class Backend:
    def __init__(self, allow_tf32=False):
        self.allow_tf32 = allow_tf32

    def temp_ptr(self, node):
        return 1 << 20

    def launch(self, node, name, dst_ptr, dst, srcs, *args):
        return SimpleNamespace(name=name, dst=dst_ptr, src=[p for p, _ in srcs])

    def launch_node(self, node):
        return SimpleNamespace(name="conv_2d")


@pytest.fixture
def fake(monkeypatch):
    for name, value in (("_FRONTEND", [FAKE]), ("_PLANS", {}), ("_HANDLES", {}), ("_device", lambda: 0),
                        ("tensor_ptr", lambda t: 4096 * (1 + id(t) % 997))):
        monkeypatch.setattr(cudnn_conv, name, value)


def _conv(ta=ggpy.F32, tb=ggpy.F32, permuted=False):
    ctx = ggpy.Context()
    img = ctx.new_tensor(tb, (16, 20, 18, 2))
    img = ggpy.permute(img, 2, 0, 1, 3) if permuted else ggpy.cont(ggpy.permute(img, 2, 0, 1, 3))
    return ggpy.conv_2d(ctx.new_tensor(ta, (5, 3, 16, 8)), img, 2, 1, 1, 0, 1, 2)    # s (2, 1), p (1, 0), d (1, 2)


def test_no_frontend_no_candidate(monkeypatch):
    monkeypatch.setattr(cudnn_conv, "_FRONTEND", [None])
    node = _conv()
    assert "not installed" in cudnn_conv.refusal(node) and "cudnn" in ENTRY.impls
    assert [i for i in ENTRY.impls if ENTRY.accepts(node, i, None)] == ["implicit"] + (["im2col"] * ENTRY.accepts(node, "im2col", None))
    assert ENTRY.temp_size(node, "cudnn", None) == ENTRY.temp_size(node, conv_kernels.choose(node, None), None)
    code = "import sys, ggpy; from ggpy.backends.cuda.kernels import conv; assert 'cudnn' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mapping_tf32_and_steps(fake):
    node = _conv(permuted=True)
    assert ENTRY.accepts(node, "cudnn", None)
    plan, fast = cudnn_conv._plans(node)
    g, x = plan.graph, plan.x
    assert (x.dim, x.stride) == ([2, 16, 18, 20], [5760, 1, 320, 16])          # the CWHN view as it is
    assert (plan.w.dim, plan.w.stride) == ([8, 16, 3, 5], [240, 15, 5, 1])
    assert (plan.y.dim, plan.y.stride, plan.y.data_type) == ([2, 8, 14, 9], [1008, 126, 9, 1], Types.FLOAT)
    assert g.params == ([0, 1], [1, 2], [2, 1])                                # H first
    assert Notes.TENSOR_CORE in g.notes and Notes.TENSOR_CORE not in fast.graph.notes
    assert Notes.DOWN_CONVERT_INPUTS in fast.graph.notes
    assert ENTRY.temp_size(node, "cudnn", None) == 3072                              # the larger workspace
    for tf32 in (False, True):
        steps = ENTRY.steps(Backend(tf32), node, "cudnn")
        assert [s.name for s in steps] == ["cudnn_conv_f32_f32" + "_tf32" * tf32]
        assert steps[0].plan is (fast if tf32 else plan) and steps[0].workspace == 1 << 20
    builds = Graph.builds
    ENTRY.accepts(_conv(permuted=True), "cudnn", None)
    assert Graph.builds == builds                                              # planned once per key


def test_mixed_and_half_types(fake):
    node = _conv(ggpy.F16, ggpy.F32)                 # F16 kernel: converted, the conv in F32
    steps = ENTRY.steps(Backend(), node, "cudnn")
    assert [s.name for s in steps] == ["copy_f16_f32", "cudnn_conv_f16_f32"]
    assert steps[1].pack[steps[1].plan.w] == steps[0].dst == (1 << 20) + 1024
    node = _conv(ggpy.F16, ggpy.F16)                 # F16 result in the temp block, converted into the node
    steps = ENTRY.steps(Backend(), node, "cudnn")
    assert [s.name for s in steps] == ["cudnn_conv_f16_f16", "copy_f16_f32"]
    assert steps[0].plan.y.data_type == Types.HALF and steps[0].pack[steps[0].plan.y] == steps[1].src[0]
    assert ENTRY.temp_size(node, "cudnn", None) == 3072 + 4096                     # workspace, 9 * 14 * 8 * 2 halves


def test_refusal_remembered_and_falls_back(fake, monkeypatch):
    monkeypatch.setattr(Graph, "validate", lambda self: (_ for _ in ()).throw(RuntimeError("CUDNN_STATUS_BAD_PARAM")))
    node = _conv()
    assert "BAD_PARAM" in cudnn_conv.refusal(node) and not ENTRY.accepts(node, "cudnn", None)
    assert len(cudnn_conv._PLANS) == 1
    assert ENTRY.temp_size(node, "cudnn", None) == ENTRY.temp_size(node, conv_kernels.choose(node, None), None)
    assert conv_kernels._runs(node, "cudnn") == conv_kernels.choose(node, None)
