"""The package's floors: no import cycle between modules and none between packages (``rollout`` and ``store``,
say), counting imports inside functions too, since a cycle hidden in a function is still one a reader has to untangle.
The rollout's row lives in ``core/rows.py`` so that ``store`` and ``rollout`` both import it downward."""

from __future__ import annotations

import ast
from pathlib import Path

import rapo_trl

PACKAGE = Path(rapo_trl.__file__).parent


def _graph(module_level_only: bool, under: str = "") -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from package import name`` counts the submodule ``name`` when
    there is one, else the package."""
    modules = {}
    for path in (PACKAGE / under).rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        nodes = tree.body if module_level_only else ast.walk(tree)
        found = set()
        for node in nodes:
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, name, is_package=path.name == "__init__.py")
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    found.add(submodule if submodule in modules else module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = (found & set(modules)) - {name}
    return graph


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a ``from ... import`` names; a relative one (``from .base import Tool``) made absolute."""
    if not node.level:
        return node.module or ""
    parts = importer.split(".") if is_package else importer.split(".")[:-1]
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, [*path, nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph seen a floor up: ``rapo_trl.store.outage`` counts as ``rapo_trl.store``, a top-level module
    (``rapo_trl.config``) as itself."""

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    collapsed: dict[str, set[str]] = {}
    for module, imported in graph.items():
        collapsed.setdefault(package(module), set()).update(package(name) for name in imported)
    return {name: imported - {name} for name, imported in collapsed.items()}


def test_the_graph_reads_imports_at_module_level_and_inside_functions():
    assert "rapo_trl.trainer.step_rollout" in _graph(module_level_only=True)["rapo_trl.trainer.trainer"]
    assert "rapo_trl.rollout.agent" not in _graph(module_level_only=True)["rapo_trl.evaluation"]
    assert "rapo_trl.rollout.agent" in _graph(module_level_only=False)["rapo_trl.evaluation"]  # inside a function
    assert "rapo_trl.tools.base" in _graph(module_level_only=True)["rapo_trl.tools"]  # a relative import


def test_no_import_cycle_between_modules_counting_imports_inside_functions():
    cycle = _cycle(_graph(module_level_only=False))
    assert cycle is None, " -> ".join(cycle)


def test_no_import_cycle_between_packages_counting_imports_inside_functions():
    packages = _packages(_graph(module_level_only=False))
    assert {"rapo_trl.core", "rapo_trl.store"} <= packages["rapo_trl.rollout"]
    cycle = _cycle(packages)
    assert cycle is None, " -> ".join(cycle)


def test_a_cycle_through_a_function_level_import_is_found():
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": {"p.b.z"}, "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert _cycle(graph) is None
    assert _cycle(_packages(graph)) == ["p.a", "p.b", "p.a"]
