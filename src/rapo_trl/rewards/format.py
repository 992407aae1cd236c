"""RAPO's format check (docs/design.md, Outcome reward): any failure makes the outcome reward -1."""

from __future__ import annotations

import re

from rapo_trl.protocol import TOOL_TAGS
from rapo_trl.rewards.parsing import find_boxed

_RESULT_BLOCK_RE = re.compile(r"<result>.*?</result>", re.DOTALL)
_THINK_RE = re.compile(r"</?think>")
_TOOL_EVENT_RE = re.compile(r"</?(?:python|search|result)>")


def mask_results(text: str) -> str:
    """The text with every ``<result>`` block emptied."""
    # Tool output is written by the environment, not the policy: a tag printed by code or found in a
    # search passage must not count as the policy breaking the format.
    return _RESULT_BLOCK_RE.sub("<result></result>", text)


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


def _check_tools(text: str) -> str | None:
    # Tool and result tags must form groups <T> </T> <result> </result>, in that order.
    expected: list[str] = []
    for event in _TOOL_EVENT_RE.finditer(text):
        tag = event.group()
        if expected:
            if tag != expected[0]:
                return f"expected {expected[0]} but found {tag} at char {event.start()}"
            expected.pop(0)
        elif tag in ("<python>", "<search>"):
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


def format_check(text: str) -> tuple[bool, str | None]:
    """Check a completion against RAPO's format rules; return ``(ok, reason)``.

    Rules, in the order checked: balanced, non-empty ``<think>`` blocks (at least one); every
    ``<python>``/``<search>`` followed in order by its closing tag and a ``<result>...</result>``
    (and no result without a call); exactly one ``<answer>...</answer>``; a complete ``\\boxed{}``
    inside it. ``reason`` names the first rule that failed (None when ok). Result contents are
    ignored. Strip retrieved blocks first when they must not count (see ``strip_retrieved_blocks``).
    """
    masked = mask_results(text)
    for check in (_check_think, _check_tools, _check_answer):
        reason = check(masked)
        if reason is not None:
            return False, reason
    return True, None


def tools_used(text: str) -> set[str]:
    """Which tools (``"python"``, ``"search"``) the completion called."""
    masked = mask_results(text)
    return {name for name in TOOL_TAGS if f"<{name}>" in masked}
