"""TRL-style environments and JSON tools for the chat-template tool protocol's tests, and scripted turns that call
them as the tiny model's Qwen2.5 template writes a call."""

from __future__ import annotations

import json


def call(name: str, text: str = "", **arguments) -> str:
    """A policy turn making one JSON tool call, written as the Qwen2.5 template renders it, ending the turn."""
    head = f"{text}\n" if text else ""
    return f'{head}<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call><|im_end|>'


class Counter:
    """State across calls: a running total; ``get_reward`` reads it."""

    def __init__(self):
        self.total = 0
        self.resets = []

    def reset(self, **kwargs) -> str | None:
        self.total = 0
        self.resets.append(kwargs)
        return None

    def add(self, n: int) -> int:
        """Add a number to the running total and return the total.

        Args:
            n: the number to add
        """
        self.total += n
        return self.total

    def explode(self) -> str:
        """A tool that always fails."""
        raise RuntimeError("the counter exploded")

    def get_reward(self) -> float:
        return float(self.total)


class SqliteCounter(Counter):
    """A ``Counter`` that keeps its total in a ``sqlite3`` connection opened in ``reset``: a connection may be used
    only on the thread that made it, so its methods fail on any other."""

    def reset(self, **kwargs) -> str | None:
        import sqlite3

        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE total (n INTEGER)")
        self.db.execute("INSERT INTO total VALUES (0)")
        return super().reset(**kwargs)

    def add(self, n: int) -> int:
        """Add a number to the running total and return the total.

        Args:
            n: the number to add
        """
        self.db.execute("UPDATE total SET n = n + ?", (n,))
        self.total = self.db.execute("SELECT n FROM total").fetchone()[0]
        return self.total


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b
