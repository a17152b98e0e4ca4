"""Configuration is read in one place: no module of the control plane, the SDK or the CLI reads an environment
variable except ``sandbox/environment.py``. Handing the whole environment down to a child process (``{**os.environ,
...}``) is not a read. The in-sandbox agent (a program of its own, with its own entry point) and the test doubles are
outside the rule."""

from __future__ import annotations

import ast
from pathlib import Path

from sandbox import environment

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox"
OUTSIDE_THE_RULE = ("environment.py", "agent/", "testing/")


def _reads(tree: ast.AST) -> list[int]:
    """Lines that read one variable: ``os.environ.get(...)``, ``os.environ[...]``, ``os.getenv(...)``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = node.func.value, node.func.attr
            if name == "getenv" and isinstance(owner, ast.Name) and owner.id == "os":
                lines.append(node.lineno)
            if name in {"get", "setdefault"} and ast.unparse(owner) in {"os.environ", "environ"}:
                lines.append(node.lineno)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) in {"os.environ", "environ"}:
            lines.append(node.lineno)
    return lines


def test_only_the_environment_module_reads_variables() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(OUTSIDE_THE_RULE):
            continue
        found += [f"sandbox/{relative}:{line}" for line in _reads(ast.parse(path.read_text()))]
    assert found == [], f"read these through sandbox/environment.py: {found}"


def test_the_checker_sees_each_kind_of_read() -> None:
    source = "import os\nos.environ.get('A')\nos.getenv('B')\nos.environ['C']\nx = {**os.environ}\n"
    assert _reads(ast.parse(source)) == [2, 3, 4]


def test_an_empty_variable_counts_as_unset(monkeypatch) -> None:
    monkeypatch.setenv(environment.TARGET, "")
    assert environment.target() is None
    monkeypatch.setenv(environment.TARGET, "127.0.0.1:1")
    assert environment.target() == "127.0.0.1:1"
