"""Fails when a module of the package grows past the size one concept should need (see docs/architecture.md):
above 800 lines always; above 500 unless its docstring says why it is one concept (the words "one concept")."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 800
EXPLAIN_ABOVE = 500
ROOT = Path(__file__).resolve().parent.parent / "sandbox"
GENERATED = "grpc_gen"


def main() -> int:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        if GENERATED in path.parts:
            continue
        text = path.read_text()
        lines = len(text.splitlines())
        where = f"{path.relative_to(ROOT.parent)}: {lines} lines"
        if lines > MAX_LINES:
            problems.append(f"module over {MAX_LINES} lines: {where}")
        elif lines > EXPLAIN_ABOVE and "one concept" not in (ast.get_docstring(ast.parse(text)) or ""):
            problems.append(f"over {EXPLAIN_ABOVE} lines, no docstring saying why it is one concept: {where}")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
