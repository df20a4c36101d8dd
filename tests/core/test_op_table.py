"""The op table (ggpy/optable.py) is the one list of ops: every op has its constructors, a float64 reference,
test-backend-ops cases, a CPU kernel and a CUDA kernel entry (or an explicit refusal), each in its family's module;
no registry names an op the table lacks; nothing outside the table keeps its own list of view or in-place ops."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import ggpy
from ggpy.backends.cpu.registry import KERNELS as CPU_KERNELS
from ggpy.backends.cuda import kernels as cuda_kernels  # noqa: F401 - registers the CUDA entries (no GPU needed)
from ggpy.backends.cuda.registry import KERNELS as CUDA_KERNELS
from ggpy.optable import ACTIVATIONS, FAMILIES, OPS, UNARY_OPS
from ggpy.test_backend_ops import all_cases
from ggpy.test_backend_ops.references import REFERENCES

ROOT = Path(ggpy.__file__).parent
COMPUTING = [name for name, op in OPS.items() if not op.view]
CASE_OPS = {c.op for c in all_cases()}


@pytest.mark.parametrize("name", list(OPS))
def test_constructors_record_the_op(name):
    op = OPS[name]
    for ctor in op.constructors:
        fn = getattr(ggpy, ctor, None)
        assert callable(fn), f"op {name}: constructor ggpy.{ctor} missing"
        module = importlib.import_module(fn.__module__)
        assert module.__name__ == f"ggpy.ops.{op.family}", f"ggpy.{ctor} lives in {module.__name__}"


@pytest.mark.parametrize("name", COMPUTING)
def test_every_op_is_implemented_and_checked(name):
    op = OPS[name]
    assert name in REFERENCES, f"op {name}: no float64 reference"
    assert REFERENCES[name].__module__.endswith(f"references.{op.family}"), REFERENCES[name].__module__
    assert name in CASE_OPS, f"op {name}: no test-backend-ops case"
    cpu = CPU_KERNELS.get(name)
    assert cpu is not None, f"op {name}: no CPU kernel"
    assert f".kernels.{op.family}" in cpu.bind.__module__, f"op {name}: CPU kernel in {cpu.bind.__module__}"
    cuda = CUDA_KERNELS.get(name)
    assert cuda is not None, f"op {name}: no CUDA kernel entry (register one whose refusal says why)"
    assert cuda.refusal.__module__ == f"ggpy.backends.cuda.kernels.{op.family}", cuda.refusal.__module__


def test_registries_name_only_table_ops():
    for registry in (CPU_KERNELS, CUDA_KERNELS, REFERENCES):
        assert set(registry) <= set(COMPUTING), set(registry) - set(COMPUTING)
    assert CASE_OPS <= set(COMPUTING)


def test_families_have_one_module_per_layer():
    for family in FAMILIES:
        assert (ROOT / "ops" / f"{family}.py").exists(), family
        if family == "view":
            continue
        for path in (ROOT / "backends/cuda/kernels" / f"{family}.py",
                     ROOT / "test_backend_ops/cases" / f"{family}.py",
                     ROOT / "test_backend_ops/references" / f"{family}.py"):
            assert path.exists(), path
        cpu = ROOT / "backends/cpu/kernels"
        assert (cpu / f"{family}.py").exists() or (cpu / family / "__init__.py").exists(), family


def test_activation_ids_are_defined_once():
    assert sorted(ACTIVATIONS.values()) == list(range(1, len(ACTIVATIONS) + 1))
    assert set(ACTIVATIONS) <= set(UNARY_OPS)


def test_no_other_list_of_view_or_inplace_ops():
    """No module but the op table holds a literal tuple/list/set of view op names (the four copies of VIEW_OPS)
    or of more than three in-place op names (INPLACE_OPS)."""
    views = {n for n, op in OPS.items() if op.view}
    inplace = {n for n, op in OPS.items() if op.inplace}
    for path in ROOT.rglob("*.py"):
        if path.name == "optable.py" and path.parent == ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                assert not (len(names & views) >= 2), f"{path}: a list of view ops {sorted(names)}"
                assert len(names & inplace) <= 4 or not names <= inplace, f"{path}: a list of in-place ops"


def _register_args(tree) -> set:
    """ids of the AST nodes inside register(...) calls' arguments (an entry naming its ops) and `__all__` lists."""
    inside = set()
    for node in ast.walk(tree):
        call = isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "register"
        names = isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
        if call or names:
            inside.update(id(n) for n in ast.walk(node))
    return inside


def test_no_list_of_op_names_outside_the_op_table():
    """Which ops do what is a fact of the op table or an entry of a backend's table: no module of ggpy (the
    test-backend-ops cases aside) holds a literal tuple, list or set of two or more op names but a register(...)
    call naming its entry's ops; dicts of per-op code (C expressions, numba functions) are kernels, not lists."""
    for path in ROOT.rglob("*.py"):
        if path == ROOT / "optable.py" or "test_backend_ops" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        skip = _register_args(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in skip:
                names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                assert len(names & set(OPS)) < 2, f"{path}:{node.lineno}: a list of op names {sorted(names & set(OPS))}"


def test_no_backend_imports_the_other_and_no_import_cycle():
    """ggpy/backends/cuda and ggpy/backends/cpu import nothing from each other; no import inside a function in
    the CUDA backend (the former cycle through backend.py)."""
    for a, b in (("cuda", "cpu"), ("cpu", "cuda")):
        for path in (ROOT / "backends" / a).rglob("*.py"):
            text = path.read_text()
            assert f"backends.{b}" not in text and f"..{b}." not in text and f"from ..{b} " not in text, path
    for path in (ROOT / "backends" / "cuda").rglob("*.py"):
        if path.name == "__init__.py" and path.parent.name == "cuda":
            continue        # the package's lazy CUDABackend attribute: `import ggpy` needs no cuda-python
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not inner, f"{path}: import inside {node.name}()"


def _module_imports() -> dict:
    """{module: set of ggpy modules it imports at module level (and the packages whose __init__ that runs,
    ggpy's own aside)}."""
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = ("ggpy",) + path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    deps = {}
    for mod, path in names.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        out = set()
        for node in ast.parse(path.read_text()).body:        # module level only (lazy imports are deliberate)
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: package.count(".") + 2 - node.level]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in names:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != mod:
                    out.add(t)
                    parts = t.split(".")
                    out.update(".".join(parts[:k]) for k in range(2, len(parts)))     # parent packages' __init__
        own = {".".join(mod.split(".")[:k]) for k in range(1, mod.count(".") + 2)}    # already importing
        deps[mod] = out - own
    return deps


def test_op_table_at_the_bottom():
    """The op table imports nothing of ggpy, and nothing under ggpy/graph imports the op constructors (ggpy/ops)."""
    deps = _module_imports()
    assert deps["ggpy.optable"] == set()
    for mod, imported in deps.items():
        if mod.startswith("ggpy.graph"):
            assert not any(d == "ggpy.ops" or d.startswith("ggpy.ops.") for d in imported), (mod, imported)


def test_no_import_cycle():
    deps = _module_imports()
    state = {}

    def visit(m, stack):
        state[m] = 1
        for d in deps.get(m, ()):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d, stack + [d])
        state[m] = 2
    for m in deps:
        if m not in state:
            visit(m, [m])
