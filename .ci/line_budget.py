"""ggpy's line budgets (tinygrad keeps one): the lines of code, blank lines, comments and docstrings not counted, of
ggpy's runtime (ggpy/ without ggpy/models) and of its models (ggpy/models) must each stay within its budget. Run by
.ci/run; `python .ci/line_budget.py [GGPY_DIR]` prints the count per folder."""
from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

BUDGETS = {"runtime": 12700, "models": 4600, "server": 900}   # server: ggpy/server (issue 30: engine and HTTP API)
#                                                 runtime 11500 -> 11800 and models 3700 -> 3750 with issue 28 (decode fusions,
#                                                 PDL, staged token loop); 12600 / 4600 with issue 29 (MoE ops, four weight types,
#                                                 eight architectures, SentencePiece vocabularies); runtime 12700 with the CPU's AVX-512 mat-vec
#                                                 and CUDA's q8_1 hand-off (issue 28, session 23); models: 3087 when they moved in, 3536 with the
#                                                 bad-input checks


def code_lines(path: Path) -> int:
    """Lines holding a token other than a comment, a docstring (a string statement) or layout."""
    lines = set()
    prev = tokenize.NEWLINE
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            prev = tok.type     # a docstring or a bare string statement
            continue
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return len(lines)


def per_folder(root: Path, models: Path) -> dict:
    """{'runtime' | 'models' | 'server': {folder: lines of code}} of the .py files under `root`."""
    parts = {"runtime": {}, "models": {}, "server": {}}
    for path in sorted(root.rglob("*.py")):
        part = parts["models" if path.is_relative_to(models) else "server" if path.is_relative_to(root / "server")
                     else "runtime"]
        key = str(path.parent.relative_to(root.parent))
        part[key] = part.get(key, 0) + code_lines(path)
    return parts


def main(root: Path) -> int:
    failed = 0
    for name, per_dir in per_folder(root, root / "models").items():
        total = sum(per_dir.values())
        for key, n in sorted(per_dir.items()):
            print(f"{n:6d}  {key}")
        print(f"{total:6d}  total lines of code of ggpy's {name} under {root} (budget {BUDGETS[name]})")
        if total > BUDGETS[name]:
            print(f"{name} line budget exceeded: {total} > {BUDGETS[name]}; make room before adding", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "ggpy")))
