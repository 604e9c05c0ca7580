"""The layering between the child (Paddle's generic side: worker, building, training loop) and the mechanisms (each
one's declaration and its own Paddle side): the child may ask the registry, a mechanism never imports the child.

Read from the source with `ast`, every import counted, those inside functions too (that is where the Paddle side
imports), and importing a.b.c counted as importing a and a.b as well (Python runs their __init__ first)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vramtune"
CHILD, MECHANISMS = "vramtune.child", "vramtune.mechanisms"
SOURCES, DIALECTS = "vramtune.sources", "vramtune.dialects"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The vramtune modules `name` imports, anywhere in its body, with the packages Python runs on the way."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    found = set()
    for target in targets:
        parts = target.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known)
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    return {name: imported(name, path, set(names)) for name, path in names.items()}


def in_folder(name: str, folder: str) -> bool:
    return name == folder or name.startswith(folder + ".")


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components: the import circles (a module in none is its own component of one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
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
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_mechanism_imports_the_child():
    graph = import_graph()
    edges = sorted(f"{source} -> {target}" for source, targets in graph.items() if in_folder(source, MECHANISMS)
                   for target in targets if in_folder(target, CHILD))
    assert not edges, "a mechanism imports the child (the child imports the registry: a circle): " + ", ".join(edges)


def test_no_import_circle_spans_the_child_and_the_mechanisms():
    graph = import_graph()
    for component in strongly_connected(graph):
        if any(in_folder(m, CHILD) for m in component) and any(in_folder(m, MECHANISMS) for m in component):
            into_child = sorted(f"{source} -> {target}" for source in component for target in graph[source]
                                if target in component and in_folder(target, CHILD) and not in_folder(source, CHILD))
            raise AssertionError(f"an import circle of {len(component)} modules holds both child/ and mechanisms/; "
                                 f"the edges closing it (into the child): {', '.join(into_child)}")


def test_no_import_circle_spans_the_child_and_the_sources_or_dialects():
    """The child builds a source's model through the source registry (sources/ and the dialect folders it lists);
    a builder that imported the child (it once took its tensor helpers from child/building.py) closed a circle."""
    graph = import_graph()
    for component in strongly_connected(graph):
        if any(in_folder(m, CHILD) for m in component):
            others = sorted(m for m in component if in_folder(m, SOURCES) or in_folder(m, DIALECTS))
            assert not others, f"an import circle of {len(component)} modules holds child/ and {', '.join(others)}"


def test_the_graph_sees_imports_inside_functions():
    """The check would pass vacuously if it missed the lazy imports: the worker imports the child's modules inside
    its functions."""
    assert "vramtune.child.training" in import_graph()["vramtune.child.worker"]
