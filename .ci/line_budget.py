"""ggpy's line budget (tinygrad keeps one): the lines of code under ggpy/, blank lines, comments and docstrings not
counted, must stay within BUDGET. Run by .ci/run; `python .ci/line_budget.py [DIR]` prints the count per folder."""
from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

BUDGET = 11500


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


def main(root: Path) -> int:
    per_dir = {}
    for path in sorted(root.rglob("*.py")):
        key = str(path.parent.relative_to(root.parent))
        per_dir[key] = per_dir.get(key, 0) + code_lines(path)
    total = sum(per_dir.values())
    for key, n in sorted(per_dir.items()):
        print(f"{n:6d}  {key}")
    print(f"{total:6d}  total lines of code under {root} (budget {BUDGET})")
    if total > BUDGET:
        print(f"line budget exceeded: {total} > {BUDGET}; make room before adding", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "ggpy")))
