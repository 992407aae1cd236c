"""Checking a user's tools and indexing them by tag.

Adding a tool of your own needs no base class: any object with ``tag``, ``timeout`` and ``run`` works.
Raise ``ToolError`` for a failure the model should see (it is counted as a failed call)::

    from rapo_trl.tools import ToolError

    class Calculator:
        tag = "calc"          # the policy writes <calc>2 * (3 + 4)</calc>
        timeout = 2.0         # seconds; run_tool_calls gives up on the call after this (plus a grace)
        description = "An arithmetic expression of numbers, + - * / and parentheses."  # taught by system_prompt_for

        def run(self, text: str) -> str:
            import ast, operator
            ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}

            def value(node):
                if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
                    return node.value
                if isinstance(node, ast.BinOp) and type(node.op) in ops:
                    return ops[type(node.op)](value(node.left), value(node.right))
                raise ToolError(f"unsupported expression: {ast.unparse(node)}")

            return str(value(ast.parse(text.strip(), mode="eval").body))

    trainer = RAPOTrainer(..., tools=[PythonTool(), Calculator()])

A plain typed function with a docstring (what TRL's ``GRPOTrainer(tools=[...])`` takes) is wrapped as a
``FunctionTool``: its name is the tag and the policy writes its arguments as JSON, ``<add>{"a": 1, "b": 2}</add>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rapo_trl.protocol import check_tool_tag

from .base import Tool
from .function_tool import as_tool


def tools_by_tag(tools: Iterable[Tool | Callable] | None) -> dict[str, Tool]:
    """``{tag: tool}`` after checking each tool's shape and tag; raises a clear error otherwise.

    Plain callables without a ``tag`` are wrapped as ``FunctionTool`` (see ``as_tool``).
    """
    registry: dict[str, Tool] = {}
    for tool in map(as_tool, tools or ()):
        if not isinstance(tool, Tool):
            raise TypeError(
                f"{tool!r} is not a tool: it needs a `tag` (str), a `timeout` (seconds) and `run(text) -> str`, "
                "or it must be a plain typed function with a docstring."
            )
        tag = check_tool_tag(tool.tag, f"on {type(tool).__name__}")
        if tag in registry:
            raise ValueError(
                f"Two tools share the tag {tag!r} ({type(registry[tag]).__name__} and {type(tool).__name__}); "
                "give each tool its own tag."
            )
        if not isinstance(tool.timeout, (int, float)) or tool.timeout <= 0:
            raise ValueError(f"Tool {tag!r} needs a positive timeout in seconds, got {tool.timeout!r}.")
        registry[tag] = tool
    return registry
