"""The tag-tool protocol and the concurrent runner the rollout engine uses.

A tool is called by the policy as ``<tag>content</tag>``; its output is shown back to the policy as
forced ``<result>`` tokens. A tool signals a failure the model should see by raising ``ToolError``;
any other exception (``SystemExit`` included), or running past its time budget, is turned into an
error result too. Only ``KeyboardInterrupt`` (the user stopping the run) gets through.
"""

from __future__ import annotations

import threading
import time
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
    """Run ``(tool, content)`` pairs concurrently; results come back in input order.

    Each call runs in a daemon thread: a tool that ignores its own timeout is given up on after it (plus a grace
    period) and cannot keep the process from exiting, as a thread pool's workers would (they are joined at exit).
    A KeyboardInterrupt raised in a tool still stops the run.
    """
    if not calls:
        return []
    slots = threading.BoundedSemaphore(max(1, min(max_workers, len(calls))))
    outcomes: list[ToolCall | BaseException | None] = [None] * len(calls)
    finished = [threading.Event() for _ in calls]
    # Set when the caller reported a call as timed out: one still waiting for a slot must not run later.
    abandoned = [threading.Event() for _ in calls]

    def work(index: int, tool: Tool, content: str) -> None:
        try:
            with slots:
                if not abandoned[index].is_set():
                    outcomes[index] = _run_one(tool, content)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller below
            outcomes[index] = error
        finally:
            finished[index].set()

    for index, (tool, content) in enumerate(calls):
        threading.Thread(target=work, args=(index, tool, content), daemon=True, name=f"rapo-tool-{tool.tag}").start()
    results = []
    for index, (tool, content) in enumerate(calls):
        budget = float(getattr(tool, "timeout", 30.0)) + _GRACE_SECONDS
        if not finished[index].wait(budget):
            abandoned[index].set()
            results.append(ToolCall(tool.tag, content, f"Error: tool '{tool.tag}' timed out after {budget:.0f}s",
                                    False, budget))
            continue
        outcome = outcomes[index]
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results
