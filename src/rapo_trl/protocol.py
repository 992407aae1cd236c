"""The tag protocol shared by the rollout engine, the rewards and the scripted experts (docs/design.md).

One place for the texts the environment inserts, so what the engine writes is exactly what rewards
strip and what the experts imitate.
"""

import re

TOOL_TAGS = ("python", "search")
"""Tags of the built-in tools."""

RESULT_TEMPLATE = "\n<result>\n{output}\n</result>\n"
"""How a tool's output is shown to the policy (forced tokens)."""

RETRIEVE_PREFACE = "Additional context is enclosed in <retrieve> </retrieve> tags. Use it if helpful."
"""The sentence that announces a retrieved step."""

RETRIEVE_TEMPLATE = "\n" + RETRIEVE_PREFACE + "\n<retrieve>\n{text}\n</retrieve>\n"
"""How a retrieved step (or the fallback text) is inserted (forced tokens)."""

PLAN_CLOSE = "</think>"
"""Closes the policy's plan: the plan boundary, where ``retrieve_at: [plan]`` retrieves, comes right after it."""

ANSWER_OPEN = "<answer>"
"""Opens the final answer: a stored step holding it is a final-answer step."""

RESERVED_TAGS = frozenset({"think", "answer", "result", "retrieve"})
"""Tags the prompt format uses for other things; a tool named like one of them would be ambiguous."""

TAG_PATTERN = r"[A-Za-z][A-Za-z0-9_.-]*"
"""What a tool's tag may look like, so that ``<tag>...</tag>`` is a well-formed tag."""


def check_tool_tag(tag, where: str) -> str:
    """``tag`` when it can name a tool; a ValueError naming ``where`` it came from otherwise."""
    if not isinstance(tag, str) or not re.fullmatch(TAG_PATTERN, tag):
        raise ValueError(f"Invalid tool tag {tag!r} {where}: use a letter followed by letters, digits, '_', '-' "
                         "or '.', so that <tag>...</tag> is a well-formed tag.")
    if tag in RESERVED_TAGS:
        raise ValueError(f"Tool tag {tag!r} {where} is reserved by the prompt format "
                         f"({', '.join(sorted(RESERVED_TAGS))}).")
    return tag


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and tail (a tool's long output, before it is shown)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-(limit - head):]}"
