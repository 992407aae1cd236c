"""Calls of a user's function, each in a daemon thread of its own, that fail with ``ToolError`` past a timeout; or,
for JSON tools asked to run as TRL runs them, on the calling thread with no timeout (``call_here``).

A thread cannot be stopped, so a call past its timeout keeps running; ``max_overdue`` bounds how many may (a function
that never returns must not pile up threads and CPU over a training run). Used by tag tools (``FunctionTool``) and by
JSON tool calls (``rapo_trl.rollout.chat_tools``), so a hung tool fails its call under either protocol.

Why a thread and not a child process that could be killed on timeout: these functions run what TRL's ``tools=`` runs,
in this process. Closures and lambdas over live objects (a retriever, an environment, a model on the GPU) do not
pickle for 'spawn' or 'forkserver', and 'spawn' re-imports the user's script. 'fork' would run each call on a
snapshot (its side effects lost), cannot use CUDA initialised here, may deadlock on a lock a torch/OpenMP thread held
at the fork, and copies the page tables of a process holding the model on every call. So threads, bounded in number.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from rapo_trl.awaiting import awaited_here, resolved

from .base import ToolError

logger = logging.getLogger("rapo_trl.tools.function_tool")

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a function tool's call may take, under either protocol."""


def call_here(name: str, function: Callable, arguments: dict) -> Any:
    """``function(**arguments)``'s value, computed on the calling thread with no timeout, as TRL's ``GRPOTrainer``
    runs its tools: for functions that need the thread that made their resources (a ``sqlite3`` connection,
    ``signal.alarm``). Raises ``ToolError`` wrapping the function's own exception (``__cause__``), as
    ``TimedCalls.call`` does. A coroutine is awaited in a thread of its own, as TRL awaits async tools on its own
    loop's thread: the calling thread may already run an event loop (a notebook's)."""
    try:
        value = resolved(function(**arguments))
    except Exception as error:  # the policy sees what went wrong; SystemExit and KeyboardInterrupt stop the run
        raise ToolError(f"{name} raised {type(error).__name__}: {error}") from error
    return value


class TimedCalls:
    """The calls of one tool: each in a daemon thread, failing with ``ToolError`` past ``timeout``; while
    ``max_overdue`` calls run on past theirs, new calls fail at once."""

    def __init__(self, name: str, timeout: float = DEFAULT_TIMEOUT_S, max_overdue: int = 4):
        self.name, self.timeout, self.max_overdue = name, timeout, max_overdue
        self._lock = threading.Lock()
        self._overdue = 0  # calls past their timeout whose thread still runs
        self._running_overdue: set[_Call] = set()  # those calls, for ``overdue_on``

    def call(self, function: Callable, positional: list, arguments: dict) -> Any:
        """``function(*positional, **arguments)``'s value (awaited when it is a coroutine); raises ``ToolError`` past
        ``timeout``, and, wrapping it, for the function's own exception (``__cause__``)."""
        with self._lock:
            if self._overdue >= self.max_overdue:
                raise ToolError(self._overdue_message(self._overdue))
        call = _Call(self, function, positional, arguments)
        call.start()
        call.join(self.timeout)
        with self._lock:  # the call's own end takes the lock too: it ended before this, or counts as overdue
            call.overdue = not call.ended
            self._overdue += call.overdue
            if call.overdue:
                self._running_overdue.add(call)
            overdue = self._overdue
        if call.overdue:
            logger.warning("%s: a call ran past its %g s timeout and keeps running in its thread (%d such "
                           "calls, new calls refused at %d).", self.name, self.timeout, overdue, self.max_overdue)
            raise ToolError(f"{self.name} timed out after {self.timeout:g} s")
        if isinstance(call.error, ToolError):
            raise call.error
        if isinstance(call.error, Exception):  # the policy sees what went wrong
            raise ToolError(f"{self.name} raised {type(call.error).__name__}: {call.error}") from call.error
        if call.error is not None:  # SystemExit, KeyboardInterrupt: as if raised here
            raise call.error
        return call.value

    def _call_ended(self, call: _Call) -> None:
        with self._lock:
            call.ended = True
            self._overdue -= call.overdue
            self._running_overdue.discard(call)

    def overdue_on(self, owner) -> bool:
        """Whether a call past its timeout still runs a method bound to ``owner`` (an environment it may yet change)."""
        with self._lock:
            return any(getattr(call.function, "__self__", None) is owner for call in self._running_overdue)

    def _overdue_message(self, count: int) -> str:
        calls, their, them = ("calls", "their", "one of them") if count > 1 else ("call", "its", "it")
        return (f"{count} {calls} of {self.name} still running after {their} {self.timeout:g} s timeout; "
                f"{self.name} takes no new call until {them} ends")


class _Call(threading.Thread):
    """One call of a tool's function in a daemon thread of its own (the runner's pool threads are joined
    at exit: a call that never returns would keep the process from ending)."""

    def __init__(self, calls: TimedCalls, function: Callable, positional: list, arguments: dict):
        super().__init__(name=f"rapo-tool-{calls.name}", daemon=True)
        self.calls, self.function, self.positional, self.arguments = calls, function, positional, arguments
        self.value: Any = None
        self.error: BaseException | None = None
        self.ended = self.overdue = False  # guarded by the calls' lock

    def run(self) -> None:
        try:
            self.value = awaited_here(self.function(*self.positional, **self.arguments))
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            self.error = error
        finally:
            self.calls._call_ended(self)
