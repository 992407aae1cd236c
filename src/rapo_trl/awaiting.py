"""A user's function may be ``async`` wherever TRL allows it (tools, reward functions, an environment's
``get_reward``): its value is then awaited to its end on an event loop of a thread of its own, since the calling
thread may already run a loop (a notebook's) and ``asyncio.run`` refuses to start a second one there."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any


def resolved(value: Any) -> Any:
    """``value``, or what it gives when awaited if it is awaitable (its exception raised here)."""
    if not inspect.isawaitable(value):
        return value
    call = _Awaited(value)
    call.start()
    call.join()
    if call.error is not None:
        raise call.error
    return call.value


def awaited_here(value: Any) -> Any:
    """``value`` awaited on a new loop of the calling thread, which must run none (a thread made for the call)."""
    return asyncio.run(_awaited(value)) if inspect.isawaitable(value) else value


class _Awaited(threading.Thread):
    """An awaitable run to its end on an event loop of a thread of its own."""

    def __init__(self, awaitable):
        super().__init__(name="rapo-await", daemon=True)
        self.awaitable = awaitable
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = awaited_here(self.awaitable)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            self.error = error


async def _awaited(awaitable):
    return await awaitable
