"""Reading a completion: its text, retrieved blocks, the answer block and the boxed answer.

Shared by the reward functions and by anything else that must see a trajectory the way the
rewards do (the rollout engine imports ``RETRIEVE_PREFACE`` and ``strip_retrieved_blocks``).
"""

from __future__ import annotations

import re
from typing import Any

# The sentence the hybrid rollout puts before every retrieved block (docs/design.md). It contains the
# literal tags "<retrieve> </retrieve>", so it has to be removed before the blocks themselves.
from rapo_trl.protocol import RETRIEVE_PREFACE

_PREFACE_RE = re.compile(r"[ \t]*" + r"\s+".join(map(re.escape, RETRIEVE_PREFACE.split())) + r"[ \t]*\n?")
_RETRIEVE_TAG_RE = re.compile(r"</?retrieve>")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED_RE = re.compile(r"\\boxed\s*\{")


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a plain string, or the concatenated contents of a list of
    message dicts (conversational form; content may itself be a list of ``{"type": "text"}`` parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for message in completion:
        content = message.get("content", "") if isinstance(message, dict) else message
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        parts.append(content or "")
    return "".join(parts)


def strip_retrieved_blocks(text: str) -> str:
    """Remove every retrieved block (``<retrieve>...</retrieve>``) and its preface sentence.

    Blocks may nest (a stored step that itself held a retrieved block); an unclosed block, as left by a
    completion cut at the length budget, is removed to the end of the text.
    """
    text = _PREFACE_RE.sub("", text)
    out, depth, pos = [], 0, 0
    for match in _RETRIEVE_TAG_RE.finditer(text):
        opening = match.group() == "<retrieve>"
        if depth == 0:
            if opening:
                out.append(text[pos : match.start()])
                depth = 1
            # A stray closing tag outside any block is kept: it is the policy's own text.
            continue
        depth += 1 if opening else -1
        if depth == 0:
            pos = match.end()
            # Drop the newline the rollout puts after the block, so stripping leaves no blank line.
            if text.startswith("\n", pos):
                pos += 1
    if depth == 0:
        out.append(text[pos:])
    return "".join(out)


def find_boxed(text: str) -> list[tuple[int, int, str]]:
    """Every complete ``\\boxed{...}`` as ``(start, end, content)``, braces inside balanced."""
    found = []
    for match in _BOXED_RE.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append((match.start(), i, text[match.end() : i - 1]))
    return found


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{}`` in ``text``, or None."""
    found = find_boxed(text)
    return found[-1][2] if found else None


def answer_blocks(text: str) -> list[str]:
    """Contents of the ``<answer>...</answer>`` blocks, in order."""
    return _ANSWER_RE.findall(text)


def extract_prediction(text: str) -> str | None:
    """The model's final answer: the last boxed value in the last answer block, else that block's bare text;
    the last boxed value anywhere only when there is no answer block (a boxed value inside ``<think>`` does not
    override the answer); None when there is nothing to score."""
    blocks = answer_blocks(text)
    if blocks:
        boxed = last_boxed(blocks[-1])
        return boxed if boxed is not None else blocks[-1].strip()
    return last_boxed(text)
