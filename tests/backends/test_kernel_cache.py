"""numba's disk cache keys an entry by the kernel's own file only; the runtime keys the CPU kernels' cache folder by
the sources of every module they reach (ggpy/backends/cpu/numba_cache.py), so editing only a helper module a
kernel calls takes effect on the next run. Run on a copy of the package, as fresh processes with an empty HOME."""
import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from ggpy.backends.cpu import numba_cache

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import numpy as np
import ggpy

ctx = ggpy.Context()
a = ctx.new_tensor(ggpy.F32, (8,))
out = ggpy.exp(a)
graph = ggpy.Graph().build_forward_expand(out)
backend = ggpy.CPUBackend(n_threads=1)
ggpy.GraphAllocator(backend).alloc_graph(graph)
a.set(np.linspace(-2, 2, 8, dtype=np.float32))
backend.compute(graph)
print(" ".join(repr(float(v)) for v in out.numpy()))
"""

HELPER_EDIT = """

@scalar
def fast_exp(x):
    return np.float32(x) + np.float32(1.0)
"""


def _run(copy: Path, home: Path) -> tuple[np.ndarray, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "GGPY_NUMBA_CACHE")}
    env.update(HOME=str(home), PYTHONPATH=str(copy), GGPY_COMPILE_WORKERS="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=copy, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return np.array([float(v) for v in r.stdout.split()]), r.stderr


def test_editing_only_a_helper_module_recompiles_the_kernels_that_call_it(tmp_path):
    copy, home = tmp_path / "src", tmp_path / "home"
    shutil.copytree(ROOT / "ggpy", copy / "ggpy", ignore=shutil.ignore_patterns("__pycache__", "models"))
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    first, err = _run(copy, home)
    np.testing.assert_allclose(first, np.exp(x.astype(np.float64)), rtol=1e-5)
    assert "compiling" in err, err
    index = {p: p.read_bytes() for p in tmp_path.rglob("*.nbi")}
    assert index
    again, err = _run(copy, home)                  # unchanged sources: served from the cache, nothing compiled
    np.testing.assert_array_equal(again, first)
    assert "compiling" not in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.nbi")} == index
    mathfn = copy / "ggpy" / "backends" / "cpu" / "kernels" / "mathfn.py"
    mathfn.write_text(mathfn.read_text() + HELPER_EDIT)  # only the helper changes, not elementwise.py
    edited, err = _run(copy, home)
    np.testing.assert_allclose(edited, x + 1, rtol=1e-6)
    assert "compiling" in err, err
    folders = sorted((home / ".cache" / "ggpy" / "numba").iterdir())   # one per key; the old one is kept
    assert len(folders) == 2 and all(any(f.rglob("*.nbi")) for f in folders), folders


def test_every_module_the_kernels_import_is_in_the_key():
    """Every module a kernel module imports (numba freezes the constants it reads there into the compiled code) is
    keyed, its own package's as those outside it."""
    pkg = ROOT / "ggpy"
    keyed = set(numba_cache.sources())
    for path in (pkg / "backends" / "cpu" / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split("."))
                names = [target / f"{a.name}.py" for a in node.names] if node.module is None else []
                for cand in [target.with_suffix(".py"), target / "__init__.py", *names]:
                    if cand.is_file():
                        assert cand in keyed, f"{path.relative_to(pkg)} imports {cand.relative_to(pkg)}, not keyed"
