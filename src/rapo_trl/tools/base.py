"""The tag-tool protocol and the concurrent runner the rollout engine uses.

A tool is called by the policy as ``<tag>content</tag>``; its output is shown back to the policy as
forced ``<result>`` tokens. A tool signals a failure the model should see by raising ``ToolError``;
any other exception (``SystemExit`` included), or running past its time budget, is turned into an
error result too. Only ``KeyboardInterrupt`` (the user stopping the run) gets through.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class ToolError(Exception):
    """Raised by a tool for a failed call; the message is what the policy sees."""


@runtime_checkable
class Tool(Protocol):
    """A tag tool: ``tag`` names it (``"python"`` for ``<python>...</python>``), ``timeout`` is its
    wall-clock budget in seconds, ``run`` maps the call's content to the text the policy sees."""

    tag: str
    timeout: float

    def run(self, text: str) -> str: ...


@dataclass
class ToolCall:
    """One executed tool call."""

    tag: str
    content: str
    output: str
    ok: bool
    seconds: float


# Extra seconds past a tool's own budget before the runner gives up on it (tools enforce their own
# budget; this only guards against a tool that ignores it).
_GRACE_SECONDS = 5.0


def _run_one(tool: Tool, content: str) -> ToolCall:
    start = time.perf_counter()
    try:
        output, ok = str(tool.run(content)), True
    except ToolError as error:
        output, ok = f"Error: {error}", False
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a broken tool must not end the rollout
        # SystemExit too (a tool calling sys.exit() is a failed call); KeyboardInterrupt still stops the run.
        output, ok = f"Error: {type(error).__name__}: {error}", False
    return ToolCall(tool.tag, content, output, ok, time.perf_counter() - start)


def run_tool_calls(calls: list[tuple[Tool, str]], max_workers: int = 8) -> list[ToolCall]:
    """Run ``(tool, content)`` pairs concurrently; results come back in input order."""
    if not calls:
        return []
    results: list[ToolCall] = []
    executor = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(calls))))
    try:
        futures = [executor.submit(_run_one, tool, content) for tool, content in calls]
        for (tool, content), future in zip(calls, futures):
            budget = float(getattr(tool, "timeout", 30.0)) + _GRACE_SECONDS
            try:
                results.append(future.result(timeout=budget))
            except FutureTimeout:
                results.append(
                    ToolCall(
                        tool.tag,
                        content,
                        f"Error: tool '{tool.tag}' timed out after {budget:.0f}s",
                        False,
                        budget,
                    )
                )
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    return results
