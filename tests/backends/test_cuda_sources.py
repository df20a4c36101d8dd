"""The CUDA C sources without a GPU: every kernels/*.cu compiles with NVRTC for sm_80 and sm_90 (so a CUDA syntax error
fails CI), each file's output holds the kernels the index says it defines, a generated chain kernel compiles, and the
kernels the Python side launches are exactly the ones the .cu files define. Compiling needs cuda-python and NVRTC
(cuda-bindings, nvidia-cuda-nvrtc), which install on a machine without a GPU; without them the compiling tests skip,
except in CI (CI set), where they fail. Every source compiles with the runtime's options plus --Ofast-compile=max
(the same parsing, template instantiation and code generation, with less optimization: ~7x faster), or without it
where NVRTC's fast mode refuses the file (__dp4a: "unsupported operation"), so a file's real error fails the full
compile. sm_90 compiles to a cubin (ptxas assembles every inline asm, sm_90's cluster and griddepcontrol ones too);
sm_80 to PTX only (compute_80: the front end and code generation with __CUDA_ARCH__ 800, whose branches hold no asm
that sm_90's lack): the test took 218 s instead of 296 s on 2 cores."""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from itertools import product

import pytest

import ggpy
from ggpy.backends.cuda import sources
from ggpy.backends.cuda.kernels import attention, attention_flash, conv, generated, layout, moe, pool, quant
from ggpy.backends.cuda.kernels.common import FLOATS, SUFFIX
from ggpy.backends.cuda.registry import KERNELS
from ggpy.graph import Context
from ggpy.graph.fusion import Chain
from ggpy.ops.layout import QUANTIZE_TO
from ggpy.test_backend_ops import all_cases
from ggpy.types import F16, F32, QUANT_TYPES

TARGETS = {"sm_80": "compute_80", "sm_90": "sm_90"}     # what each architecture compiles to: PTX, a cubin


def _compiler():
    """ggpy.backends.cuda.compiler with a working NVRTC; skips without one (fails in CI)."""
    try:
        from ggpy.backends.cuda import compiler
        compiler.nvrtc_version()
    except Exception as e:      # no cuda-python (CudaError), or no libnvrtc (cuda-bindings' loader errors)
        if os.environ.get("CI"):
            raise
        pytest.skip(f"NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc): {e}")
    return compiler


def _fast_else_full(compiler, src, target) -> bytes:
    try:
        return compiler.compile_many([dataclasses.replace(src, options=src.options + ("--Ofast-compile=max",))],
                                     target, workers=1)[0]
    except ggpy.CudaError:
        return compiler.compile_many([src], target, workers=1)[0]


def _defines(output: bytes, name: str) -> bool:
    """Kernel `name` is in a cubin's symbol table, or is an entry of a PTX."""
    return (name.encode() + b"\0" if output[:4] == b"\x7fELF" else f".entry {name}(".encode()) in output


def test_every_source_compiles_for_sm80_and_sm90(tmp_path, monkeypatch):
    compiler = _compiler()
    monkeypatch.setenv("GGPY_CUDA_CACHE", str(tmp_path))       # compile, never read a cached output
    files = sources.files()
    jobs = list(product(TARGETS.values(), files))
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool_:
        outputs = dict(zip(jobs, pool_.map(lambda job: _fast_else_full(compiler, files[job[1]], job[0]), jobs)))
    defines = {stem: [] for stem in files}
    for name, stem in sources.index().items():
        defines[stem].append(name)
    for (arch, target), stem in product(TARGETS.items(), files):
        out = outputs[target, stem]
        missing = [name for name in defines[stem] if not _defines(out, name)]
        kind_ok = out[:4] == b"\x7fELF" if target == arch else f".target {arch}".encode() in out
        assert kind_ok and not missing, f"{stem}.cu for {arch}: no kernel {missing}"


def test_a_compile_error_names_the_file_and_line(tmp_path, monkeypatch):
    compiler = _compiler()
    monkeypatch.setenv("GGPY_CUDA_CACHE", str(tmp_path))
    bad = sources.Source("bad.cu", '#include "common.cuh"\nextern "C" __global__ void k(const Args a) { undefined(a); }\n')
    with pytest.raises(ggpy.CudaError, match=r"bad\.cu \(sm_90\)(.|\n)*bad\.cu\(2\): error: identifier \"undefined\""):
        compiler.compile_many([bad], "sm_90")
    assert not list(tmp_path.glob("bad-*.cubin"))


def test_a_generated_chain_kernel_compiles(tmp_path, monkeypatch):
    """A chain kernel (generated text on common.cuh, ops.cuh and generated.cuh): scale, a broadcast bias add, a
    strided operand, gelu, F16 rounding between the nodes."""
    compiler = _compiler()
    monkeypatch.setenv("GGPY_CUDA_CACHE", str(tmp_path))
    ctx = Context()
    x, bias = ctx.new_tensor_2d(F16, 64, 8), ctx.new_tensor_1d(F16, 64)
    other = ggpy.transpose(ctx.new_tensor_2d(F16, 8, 64))
    nodes = [ggpy.scale(x, 0.5)]
    nodes.append(ggpy.add(nodes[-1], bias))
    nodes.append(ggpy.mul(nodes[-1], other))
    nodes.append(ggpy.gelu(nodes[-1]))
    name, code = generated.source(Chain(nodes))
    cubin = compiler.compile_many([sources.chain_program([code])], "sm_90")[0]
    assert name.encode() + b"\0" in cubin


def _expected_kernels() -> set:
    """Every kernel name the Python side launches (kernel_name functions and the steps' names)."""
    f = [SUFFIX[t] for t in FLOATS]
    names = {f"copy_{SUFFIX[s]}_{SUFFIX[d]}" for s, d in layout.COPY_PAIRS}
    names |= {f"{op}_{SUFFIX[t]}" for op in ("concat", "repeat", "get_rows") for t in layout.TYPES}
    names |= {f"pad_{t}" for t in f} | {f"set_rows_{s}_{SUFFIX[d]}" for s, d in product(f, layout.SET_ROWS_TO)}
    for q in (t.name for t in QUANT_TYPES):
        names |= {f"get_rows_{q}"} | {f"{k}_{q}" for k in ("mmvq", "mmvq_glu", "mmvq_s", "mmvq_s_glu", "mmvq_b", "mmvq_b_glu")}
        names |= {f"{k}_{q}_{t}" for k in ("copy", "mmv") for t in f}
    names |= {f"mmv_{a}_{b}" for a, b in product(f, f)} | {f"copy_f32_{t.name}" for t in QUANTIZE_TO}
    names |= {f"{k}_{t.name}" for k in ("mmvq_v", "mmvq_v_glu") for t in quant.MMVQ_STREAM_TYPES}
    names |= {"quantize_q8_1_f32", "norm_mmvq", "norm_mmvq_glu", "norm_mmvq_rope", "mmvq_rope", "rms_norm_mul_q8_1",
              "rms_norm_mul_q8_1_b"}
    names |= {"add_rms_norm_f32", "add_rms_norm_mul_f32"} | {f"rms_norm_mul_{t}" for t in f}
    names |= {f"rope_set_rows_{a}_{b}" for a, b in product(f, f)} | {f"rope_kv_{t}" for t in f}
    names |= {"argmax_keys", "top_k_keys"}
    names |= {f"mmv_id_{t}" for t in f} | {f"{k}_id_{q}" for k in ("mmv", "mmvq") for q in moe.QUANT}
    names |= {"moe_sort"} | {f"mm_id_{t}" for t in f} | {f"mm_id_{q}" for q in moe.QUANT}
    for c in ("", "c_"):
        names |= {f"{op}_{c}{a}_{b}" for op in generated.BINARY for a, b in product(f, f)}
        names |= {f"{op}_{c}{t}" for op in generated.UNARY for t in f}
    for t in f:
        names |= {f"{k}_{t}" for k in ("norm", "rms_norm", "norm_affine", "norm_affine_warp", "norm_affine_vec",
                                       "group_norm", "diag_mask_inf", "soft_max", "soft_max_warp", "sum_rows", "mean",
                                       "sum", "argmax", "top_k", "rope", "pool_2d_max", "pool_2d_avg", "win_part", "win_unpart",
                                       "win_part_v", "win_unpart_v", "get_rel_pos")}
        names |= {f"upscale_{mode}_{t}" for mode in pool.UPSCALE_MODES.values()}
        names |= {f"{k}_{t}_{m}" for k in ("soft_max", "soft_max_warp", "add_rel_pos") for m in f}
    for tb, td in product(FLOATS, FLOATS):
        names |= {f"im2col_{d}_{SUFFIX[tb]}_{SUFFIX[td]}" for d in ("1d", "2d")}
    for ta, tb in product(FLOATS, FLOATS):
        pair = f"{SUFFIX[ta]}_{SUFFIX[tb]}"
        names |= {f"{k}_{pair}" for k in ("im2col_pos", "im2col_cf", "conv_1d", "conv_2d", "conv_2d_dw",
                                          "conv_2d_dw_cwhn", "conv_transpose_2d")}
        names |= {f"conv_2d_direct_{pair}_{SUFFIX[td]}" for td in (F32, ta, tb)}
        names |= {f"conv_dw3_cwhn_s{s}_v{v}_{pair}_{SUFFIX[td]}" for td in (F32, tb) for s in conv.DW3_STRIDES
                  for v in (1, 4)}
    for hd, m, t in product(attention.HEAD_DIMS, (F32, F16), FLOATS):
        for d, split in product((F32, t), attention.SPLITS):
            names.add(attention.kernel_name(hd, m, t, d, split))
    names |= attention_flash.kernel_names()
    return names


def test_the_sources_define_exactly_the_kernels_python_launches():
    index = sources.index()
    expected = _expected_kernels()
    assert not expected - set(index), f"launched but in no .cu: {sorted(expected - set(index))[:20]}"
    assert not set(index) - expected, f"in a .cu but never launched: {sorted(set(index) - expected)[:20]}"


def test_kernel_names_of_every_op_case_are_defined():
    """The name functions of the entries that run a node as one launch, on every test-backend-ops case's nodes."""
    index, checked = sources.index(), set()
    for case in all_cases():
        out = case.build(Context())
        for node in _nodes(out):
            entry = KERNELS.get(node.op)
            if entry is None or entry.steps is not None or entry.refusal(node) is not None:
                continue
            name = entry.kernel_name(node, None)
            assert name in index, f"{case.id}: {node.op} launches {name!r}, defined in no .cu"
            checked.add(node.op)
    assert len(checked) > 30


def _nodes(out) -> list:
    seen, todo, nodes = set(), [out], []
    while todo:
        t = todo.pop()
        if id(t) in seen or t is None:
            continue
        seen.add(id(t))
        nodes.append(t)
        todo.extend(t.src)
    return nodes


def test_precompile_fills_the_cache_that_a_later_run_reads(tmp_path, monkeypatch, capsys):
    """python -m ggpy.backends.cuda.precompile: the named sources compiled into --cache, found there the second time;
    a malformed architecture or an unknown source refused with what was given."""
    compiler = _compiler()
    from ggpy.backends.cuda.precompile import main
    monkeypatch.setenv("GGPY_CUDA_CACHE", str(tmp_path / "elsewhere"))     # restored after the test (main sets it)
    args = ["--arch", "compute_80", "--only", "pool", "--cache", str(tmp_path)]
    assert main(args) == 0 and "compute_80: 1 compiled, 0 already cached" in capsys.readouterr().out
    assert [p.name.split("-")[:2] for p in tmp_path.iterdir()] == [["pool", "compute_80"]]
    assert main(args) == 0 and "compute_80: 0 compiled, 1 already cached" in capsys.readouterr().out
    assert compiler.cache_dir() == tmp_path
    assert main(["--arch", "hopper", "--only", "pool"]) == 2 and "['hopper']: expected sm_XY" in capsys.readouterr().err
    assert main(["--only", "nope"]) == 2 and "no kernels/*.cu named ['nope']" in capsys.readouterr().err
