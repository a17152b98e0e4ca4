"""Fails when a module of the package grows past the size one concept should need (see docs/architecture.md)."""

from __future__ import annotations

import sys
from pathlib import Path

MAX_LINES = 450
ROOT = Path(__file__).resolve().parent.parent / "sandbox"
GENERATED = "grpc_gen"


def main() -> int:
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        if GENERATED in path.parts:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            too_long.append(f"{path.relative_to(ROOT.parent)}: {lines} lines")
    for line in too_long:
        print(f"module over {MAX_LINES} lines: {line}", file=sys.stderr)
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
