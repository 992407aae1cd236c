"""No import cycles among the ``rapo`` command's modules (issue 41): `cli/errors.py` holds UsageError, so
`common`, `imports` and `user_data` no longer import each other both ways."""

from __future__ import annotations

import ast
from pathlib import Path

import rapo_trl.cli

CLI = Path(rapo_trl.cli.__file__).parent


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    modules = {("rapo_trl.cli" if path.stem == "__init__" else f"rapo_trl.cli.{path.stem}"): path
               for path in CLI.glob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        nodes = tree.body if module_level_only else ast.walk(tree)
        found = set()
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {target for target in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
                          if target in modules}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name in modules}
        graph[name] = found - {name}
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
    assert _graph(module_level_only=True)["rapo_trl.cli.common"]  # the graph sees imports at all
    for module_level_only in (True, False):
        cycle = _cycle(_graph(module_level_only))
        assert cycle is None, " -> ".join(cycle)
