"""No import cycles in the package at module level, and none in the ``rapo`` command's modules even counting imports
inside functions: `cli/errors.py` holds UsageError, so `common`, `imports` and `user_data` no longer
import each other both ways."""

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
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = (found & set(modules)) - {name}
    return graph


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


def test_no_import_cycles_in_cli_at_module_level_or_inside_functions():
    assert _graph(module_level_only=True, under="cli")["rapo_trl.cli.common"]  # the graph sees imports at all
    for module_level_only in (True, False):
        cycle = _cycle(_graph(module_level_only, under="cli"))
        assert cycle is None, " -> ".join(cycle)


def test_no_import_cycles_in_the_package_at_module_level():
    graph = _graph(module_level_only=True)
    assert "rapo_trl.trainer.step_rollout" in graph["rapo_trl.trainer.trainer"]
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle)
