"""The layering is the tool's (import-linter, configured in pyproject.toml): layers from the commands down to the core
types, the dialects independent of one another, no import cycle at any depth — every import counted, those inside
functions and under TYPE_CHECKING too. And, counted by grimp's graph with the package a module runs on the way
(importing a.b.c runs a and a.b first), no module sits in an import circle at all."""
from __future__ import annotations

import subprocess
import sys

import grimp
from conftest import HUNG, ROOT


def test_import_linter_keeps_every_contract():
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=HUNG)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def circles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's strongly connected components of more than one module, with a module importing the packages that
    hold what it imports (Python runs their __init__ first)."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        targets = set(graph.find_modules_directly_imported_by(module))
        for target in list(targets):
            parts = target.split(".")
            targets.update(".".join(parts[:n]) for n in range(1, len(parts))
                           if not module.startswith(".".join(parts[:n]) + "."))
        edges[module] = {target for target in targets if target in graph.modules and target != module}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_module_is_in_an_import_circle():
    graph = grimp.build_graph("vramtune", include_external_packages=False)
    assert len(graph.modules) > 150  # every module read
    assert circles(graph) == []


def test_a_circle_is_found_where_there_is_one():
    """The count can fail: an import back from a low module to a high one is a circle."""
    graph = grimp.build_graph("vramtune", include_external_packages=False)
    graph.add_import(importer="vramtune.core.strategy", imported="vramtune.plugins")
    assert any({"vramtune.core.strategy", "vramtune.plugins"} <= circle for circle in circles(graph))
