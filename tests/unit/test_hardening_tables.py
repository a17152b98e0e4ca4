"""docs/hardening.md names a test for every claim it makes: the four tables are there, every row names a test or says
why none can exist, and every named test is collected by pytest (a row cannot point at nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "hardening.md"
TABLES = ("Faults while rollouts run", "Hostile input", "Isolation", "Tenancy")
NODE_ID = re.compile(r"`(tests/[\w/]+\.py::[^`\s]+)`")
NO_TEST = ("Not provable here", "not provable here", "By design", "by definition")


def _tables() -> dict[str, list[str]]:
    """Each section's table rows (the header and separator rows left out)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current and line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            sections[current].append(line)
    return {name: rows[1:] for name, rows in sections.items() if rows}  # rows[0]: the header


def _collected(files: set[str]) -> set[str]:
    """The node ids pytest collects from ``files`` (imports them; runs no test, starts no container)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *sorted(files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    assert ids, f"pytest collected nothing from {sorted(files)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return ids


def test_the_four_tables_exist_and_every_row_names_a_test_or_why_not() -> None:
    tables = _tables()
    assert list(tables) == list(TABLES), f"docs/hardening.md has the tables {list(tables)}, not {list(TABLES)}"
    for name, rows in tables.items():
        assert len(rows) >= 5, f"the {name} table has {len(rows)} rows"
        for row in rows:
            assert NODE_ID.search(row) or any(why in row for why in NO_TEST), (
                f"a row of the {name} table names no test and does not say why none can exist: {row[:200]}"
            )


def test_every_named_test_exists() -> None:
    named = {node for rows in _tables().values() for row in rows for node in NODE_ID.findall(row)}
    assert len(named) >= 40, sorted(named)
    missing_files = sorted({n.split("::")[0] for n in named if not (ROOT / n.split("::")[0]).is_file()})
    assert not missing_files, f"docs/hardening.md names test files that do not exist: {missing_files}"
    collected = _collected({n.split("::")[0] for n in named})
    # A node id without parameters names every parametrization of its test.
    dangling = sorted(n for n in named if n not in collected and not any(c.startswith(n + "[") for c in collected))
    assert not dangling, f"docs/hardening.md names tests pytest does not collect: {dangling}"
