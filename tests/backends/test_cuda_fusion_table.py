"""No GPU needed: which fused kernels the CUDA backend runs is a lookup in its kernel table (Kernel.fuses of the
anchor op's entry, ggpy/backends/kernel.py), asked by the backend-independent fusion pass: a stand-in backend over
the CUDA table finds the patterns the GPU runs (a GEMM's bias without its activation, LayerNorm's affine with it,
add + rms_norm, elementwise chains; no epilogue after the dot-product kernel)."""
import ggpy
from ggpy.backends.base import Backend
from ggpy.backends.cuda import kernels  # noqa: F401 - registers the CUDA entries (no cuda-python needed)
from ggpy.backends.cuda.cublas import MISSING
from ggpy.backends.cuda.registry import KERNELS


class TableOnly(Backend):
    """The CUDA kernel table without a device: what runs where and which patterns fuse."""
    kind, kernels, fuse = "CUDA", KERNELS, True

    def __init__(self):
        super().__init__(None)


def _fusions(out):
    graph = ggpy.Graph().build_forward_expand(out)
    return sorted((f.pattern, tuple(n.op for n in f.computed)) for f in TableOnly().fusions(graph).values())


def test_patterns_the_table_runs():
    ctx = ggpy.Context()
    x, r = ctx.new_tensor(ggpy.F32, (64, 10)), ctx.new_tensor(ggpy.F32, (32, 10))
    w, b = ctx.new_tensor(ggpy.F32, (64, 32)), ctx.new_tensor(ggpy.F32, (32,))
    g, beta = ctx.new_tensor(ggpy.F32, (32,)), ctx.new_tensor(ggpy.F32, (32,))
    y = ggpy.gelu(ggpy.add(ggpy.mul_mat(w, x), b))                          # the activation stays a node on CUDA
    s = ggpy.add(r, y)
    h = ggpy.rms_norm(s, 1e-6)                                               # the residual stream: s read again
    ln = ggpy.gelu(ggpy.add(ggpy.mul(ggpy.norm(ggpy.add(s, h), 1e-5), g), beta))
    out = ggpy.exp(ggpy.tanh(ggpy.sub(ln, s)))
    found = _fusions(out)
    expected = [("add_rms_norm", ("add", "rms_norm")), ("chain", ("sub", "tanh", "exp")),
                ("norm_affine", ("norm", "mul", "add", "gelu"))]
    if MISSING is None:                     # the GEMM with cuBLASLt's BIAS epilogue (the gelu stays alone)
        expected.append(("epilogue", ("mul_mat", "add")))
    else:                                   # no cuBLASLt: the mul_mat is refused, its add and gelu make a chain
        expected.append(("chain", ("add", "gelu")))
    assert found == sorted(expected)


def test_no_epilogue_after_the_dot_product_kernel():
    """A few columns of a quantized a run as mmvq, which takes no bias: the add stays a node (a chain with the
    activation after it)."""
    ctx = ggpy.Context()
    w, x, b = ctx.new_tensor(ggpy.Q8_0, (64, 32)), ctx.new_tensor(ggpy.F32, (64, 2)), ctx.new_tensor(ggpy.F32, (32,))
    y = ggpy.mul_mat(w, x)
    assert TableOnly().impl_for(y) == "mmvq"
    assert _fusions(ggpy.silu(ggpy.add(y, b))) == [("chain", ("add", "silu"))]


def test_decode_patterns_of_a_llama_block():
    """One token through a llama block with Q4_K weights: rms_norm + weight with the two products reading it (k and,
    here, o: norm_mat_vec), the K rows roped into an F16 cache, the down projection + residual in the integer
    dot-product kernel, gate / up + silu * up in one launch, and both residual adds with the next norm and its
    weight."""
    ctx = ggpy.Context()
    d, f, hd = 256, 512, 64
    w = {k: ctx.new_tensor(ggpy.Q4_K, ne) for k, ne in (("k", (d, d)), ("o", (d, d)), ("g", (d, f)), ("u", (d, f)),
                                                        ("d", (f, d)))}
    n1, n2, n3 = (ctx.new_tensor(ggpy.F32, (d,)) for _ in range(3))
    x, pos = ctx.new_tensor(ggpy.F32, (d, 1)), ctx.new_tensor(ggpy.I32, (1,))
    cache = ctx.new_tensor(ggpy.F16, (d, 32))
    h = ggpy.mul(ggpy.rms_norm(x, 1e-5), n1)
    k = ggpy.rope_ext(ggpy.reshape_3d(ggpy.mul_mat(w["k"], h), hd, d // hd, 1), pos, None, hd, 0, 4096, 10000.0, 1.0,
                      0.0, 1.0, 32.0, 1.0)
    kv = ggpy.set_rows(cache, ggpy.reshape_2d(k, d, 1), pos)
    s = ggpy.add(x, ggpy.mul_mat(w["o"], h))
    m = ggpy.mul(ggpy.rms_norm(s, 1e-5), n2)
    s2 = ggpy.add(s, ggpy.mul_mat(w["d"], ggpy.mul(ggpy.silu(ggpy.mul_mat(w["g"], m)), ggpy.mul_mat(w["u"], m))))
    out = ggpy.mul(ggpy.rms_norm(ggpy.add(s2, x), 1e-5), n3)
    graph = ggpy.Graph().build_forward_expand(kv).build_forward_expand(out)
    found = sorted((f.pattern, tuple(n.op for n in f.computed)) for f in TableOnly().fusions(graph).values())
    assert found == sorted([("norm_mat_vec", ("rms_norm", "mul", "mul_mat", "mul_mat")),
                            ("rope_set_rows", ("rope", "set_rows")), ("add_rms_norm", ("add", "rms_norm", "mul")),
                            ("glu", ("mul_mat", "silu", "mul_mat", "mul")), ("mul_mat_add", ("mul_mat", "add")),
                            ("add_rms_norm", ("add", "rms_norm", "mul"))]), found
