"""RAPO's format check (docs/design.md, Outcome reward): any failure makes the outcome reward -1."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from rapo_trl.protocol import RESERVED_TAGS, TAG_PATTERN, TOOL_TAGS, check_tool_tag
from rapo_trl.rewards.parsing import find_boxed

_RESULT_BLOCK_RE = re.compile(r"<result>.*?</result>", re.DOTALL)
_THINK_RE = re.compile(r"</?think>")
_TAG_RE = re.compile(TAG_PATTERN)
# A tag closed right before a result block (whitespace allowed): the completion uses it as a tool call.
_CALL_END_RE = re.compile(r"</(" + TAG_PATTERN + r")>\s*<result>")


def mask_results(text: str) -> str:
    """The text with every ``<result>`` block emptied."""
    # Tool output is written by the environment, not the policy: a tag printed by code or found in a
    # search passage must not count as the policy breaking the format.
    return _RESULT_BLOCK_RE.sub("<result></result>", text)


def _checked_tags(tool_tags: Iterable[str]) -> tuple[str, ...]:
    if isinstance(tool_tags, str):
        raise TypeError(f"tool_tags must be a collection of tag names, not the string {tool_tags!r}.")
    tags = tuple(dict.fromkeys(tool_tags))
    for tag in tags:
        check_tool_tag(tag, "in tool_tags")
    return tags


def _tool_tags(masked: str, tool_tags: Iterable[str] | None) -> tuple[str, ...]:
    """The tags that are tool calls in ``masked``: ``tool_tags`` when given, else the built-in tools' tags
    plus every other non-reserved tag the completion closes right before a ``<result>`` (a function tool)."""
    if tool_tags is not None:
        return _checked_tags(tool_tags)
    called = (m.group(1) for m in _CALL_END_RE.finditer(masked))
    return tuple(dict.fromkeys([*TOOL_TAGS, *(tag for tag in called if tag not in RESERVED_TAGS)]))


def _check_think(text: str) -> str | None:
    tags = list(_THINK_RE.finditer(text))
    if not tags:
        return "no <think> block"
    open_at = None
    for tag in tags:
        if tag.group() == "<think>":
            if open_at is not None:
                return "<think> opened again before </think>"
            open_at = tag.end()
        else:
            if open_at is None:
                return "</think> without an opening <think>"
            if not text[open_at : tag.start()].strip():
                return "empty <think> block"
            open_at = None
    if open_at is not None:
        return "<think> never closed"
    return None


@lru_cache(maxsize=256)
def _tool_event_re(tags: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"</?(?:" + "|".join(map(re.escape, (*tags, "result"))) + r")>")


def _check_tools(text: str, tags: tuple[str, ...]) -> str | None:
    # Tool and result tags must form groups <T> </T> <result> </result>, in that order. Other tags
    # (stray markup, <think>, <answer>) are not tool events and are ignored here.
    openings = {f"<{tag}>" for tag in tags}
    expected: list[str] = []
    for event in _tool_event_re(tags).finditer(text):
        tag = event.group()
        if expected:
            if tag != expected[0]:
                return f"expected {expected[0]} but found {tag} at char {event.start()}"
            expected.pop(0)
        elif tag in openings:
            name = tag[1:-1]
            expected = [f"</{name}>", "<result>", "</result>"]
        else:
            return f"{tag} at char {event.start()} without a preceding tool call"
    if expected:
        return f"tool call not completed: missing {expected[0]}"
    return None


def _check_answer(text: str) -> str | None:
    opens, closes = text.count("<answer>"), text.count("</answer>")
    if opens != 1 or closes != 1:
        return f"expected exactly one <answer>...</answer>, found {opens} <answer> and {closes} </answer>"
    start, end = text.index("<answer>"), text.index("</answer>")
    if end < start:
        return "</answer> before <answer>"
    if not find_boxed(text[start + len("<answer>") : end]):
        return "no complete \\boxed{} inside <answer>"
    return None


def format_check(text: str, tool_tags: Iterable[str] | None = None) -> tuple[bool, str | None]:
    """Check a completion against RAPO's format rules; return ``(ok, reason)``.

    Rules, in the order checked: balanced, non-empty ``<think>`` blocks (at least one); every tool call
    ``<T>`` followed in order by its closing ``</T>`` and a ``<result>...</result>`` (and no result
    without a call); exactly one ``<answer>...</answer>``; a complete ``\\boxed{}`` inside it. ``reason``
    names the first rule that failed (None when ok). Result contents are ignored. Strip retrieved blocks
    first when they must not count (see ``strip_retrieved_blocks``).

    The tool tags ``T`` are ``tool_tags`` when given. By default they are ``<python>`` and ``<search>``
    plus every other tag the completion uses as a call, i.e. closes right before a ``<result>`` block
    (whitespace allowed), such as a function tool's ``<add>{"a": 1}</add>``; the prompt format's own tags
    (``think``, ``answer``, ``result``, ``retrieve``) never are. Any other tag is ordinary text.
    """
    masked = mask_results(text)
    tags = _tool_tags(masked, tool_tags)
    for check in (_check_think, lambda t: _check_tools(t, tags), _check_answer):
        reason = check(masked)
        if reason is not None:
            return False, reason
    return True, None


def tools_used(text: str, tool_tags: Iterable[str] | None = None) -> set[str]:
    """Which tools the completion called (``"python"``, ``"search"``, a function tool's tag).

    ``tool_tags`` as for ``format_check``.
    """
    masked = mask_results(text)
    return {name for name in _tool_tags(masked, tool_tags) if f"<{name}>" in masked}
