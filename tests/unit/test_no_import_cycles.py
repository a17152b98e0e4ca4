"""The ``sandbox`` package has no import cycle: not between packages, not inside one, and not through an import
hidden under ``TYPE_CHECKING`` or inside a function. The layers contracts in pyproject.toml keep the big picture;
this keeps every corner, including the modules no contract names.

The graph is grimp's (the one import-linter reads), built from the source, so it sees every ``import`` statement
wherever it is written."""

from __future__ import annotations

import itertools

import grimp
import pytest

PACKAGE = "sandbox"


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.find_modules_directly_imported_by(root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    """One cycle of a component, each import with its line: what to break."""
    members = set(component)
    path = [component[0]]
    while True:
        here = path[-1]
        nxt = next(m for m in sorted(graph.find_modules_directly_imported_by(here)) if m in members)
        if nxt in path:
            path = [*path[path.index(nxt) :], nxt]
            break
        path.append(nxt)
    steps = []
    for importer, imported in itertools.pairwise(path):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = ", ".join(f"l.{d['line_number']}" for d in details)
        steps.append(f"  {importer} -> {imported} ({where})")
    return f"{len(component)} modules: {', '.join(component)}\n" + "\n".join(steps)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def test_the_package_has_no_import_cycle(graph: grimp.ImportGraph) -> None:
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(describe(graph, c) for c in cycles)


def test_the_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b", line_number=1, line_contents="import p.b")
    graph.add_import(importer="p.b", imported="p.c", line_number=2, line_contents="import p.c")
    graph.add_import(importer="p.c", imported="p.a", line_number=3, line_contents="import p.a")
    graph.add_import(importer="p.d", imported="p.a", line_number=4, line_contents="import p.a")
    assert strongly_connected(graph) == [["p.a", "p.b", "p.c"]]
    said = describe(graph, ["p.a", "p.b", "p.c"])
    assert "p.a -> p.b (l.1)" in said and "p.c -> p.a (l.3)" in said
