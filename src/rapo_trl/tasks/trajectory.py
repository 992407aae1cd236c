"""Writing tagged trajectories for the scripted experts, with tool results as the rollout shows them.

Tool results come from the real tools when the caller passes them (``tools={"python": PythonTool(),
"search": SearchTool(corpus)}``), so stored traces match training rollouts token for token;
otherwise from local stand-ins that produce the same kind of text.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Mapping
from typing import Any

# How the rollout appends a tool's output after the call (``RolloutConfig.result_template`` by default).
from rapo_trl.protocol import result_block


def run_python_locally(code: str) -> str:
    """What the expert's own (trusted, generated) code prints, exactly as ``PythonTool`` returns it."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(code, {"__builtins__": __builtins__})  # noqa: S102 - only ever our generated code
    return buffer.getvalue()


def format_search_results(passages: list[Mapping[str, str]]) -> str:
    """Numbered passages, one per line: ``Doc 1 (Title): text``."""
    lines = []
    for i, passage in enumerate(passages, 1):
        title = passage.get("title")
        lines.append(f"Doc {i} ({title}): {passage['text']}" if title else f"Doc {i}: {passage['text']}")
    return "\n".join(lines)


class TrajectoryWriter:
    """Accumulates one assistant message: think steps, tool calls with their results, the answer.

    ``tools`` maps a tag to a real tool (anything with ``run(text) -> str``); ``fallbacks`` maps a
    tag to a local stand-in used when no real tool is given.
    """

    def __init__(
        self,
        tools: Mapping[str, Any] | None = None,
        fallbacks: Mapping[str, Callable[[str], str]] | None = None,
    ):
        self.tools = dict(tools or {})
        self.fallbacks = dict(fallbacks or {})
        self.parts: list[str] = []

    def think(self, text: str) -> None:
        self.parts.append(f"<think>{text}</think>\n")

    def call(self, tag: str, content: str) -> str:
        """Write ``<tag>content</tag>`` and its result block; return the tool's output."""
        if tag in self.tools:
            # Run it exactly as the rollout does (errors become "Error: ..." output).
            from rapo_trl.tools.base import run_tool_calls

            output = run_tool_calls([(self.tools[tag], content)])[0].output
        elif tag in self.fallbacks:
            output = self.fallbacks[tag](content)
        else:
            raise KeyError(f"no tool or stand-in for <{tag}>")
        body = f"\n{content}\n" if tag == "python" else content
        self.parts.append(f"<{tag}>{body}</{tag}>" + result_block(output))
        return output

    def answer(self, text: str) -> None:
        """The final answer block; ``text`` must contain the ``\\boxed{}`` value."""
        self.parts.append(f"<answer>{text}</answer>")

    def text(self) -> str:
        return "".join(self.parts)
