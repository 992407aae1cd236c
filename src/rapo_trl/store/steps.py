"""RAPO's step definition, the key/query preprocessing, and the step records built from them.

A step is the agent's text up to and including one tool's closing tag (``</python>``, ``</search>`` or the tag of a
tool of yours: the tags the trainer runs, so stored steps end where the rollout retrieves) or the end of the
trajectory, plus the ``<result>...</result>`` block the environment appended after it.
A record's key is the context before its step (question + earlier steps), preprocessed exactly like
the queries the rollout sends to :meth:`TraceStore.select`.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass

from rapo_trl.protocol import TOOL_CLOSE, TOOL_TAGS

# A result may be cut off by a length limit: then it runs to the end of the text.
_RESULT_BLOCK = re.compile(r"\s*<result>.*?(?:</result>|\Z)", re.S)
_RAPO_TAG = re.compile(r"</?(?:think|python|search|result|answer)>")
KNOWN_TAGS = ("<think>", "<python>", "<search>", "<result>", "<answer>")

# Chat-template system turns (ChatML as used by Qwen/SmolLM, and Llama 3).
_SYSTEM_TURNS = (
    re.compile(r"<\|im_start\|>\s*system\b.*?(?:<\|im_end\|>|\Z)", re.S),
    re.compile(r"<\|start_header_id\|>\s*system\s*<\|end_header_id\|>.*?(?:<\|eot_id\|>|\Z)", re.S),
)
# Remaining special tokens, with the role name that follows a turn opener.
_SPECIAL_TOKEN = re.compile(
    r"<\|[A-Za-z_]+\|>(?:\s*(?:system|user|assistant|tool)(?=\s|<\|)(?:\s*<\|end_header_id\|>)?)?"
)
# Retrieved blocks are policy context the stored keys never contain; keep them out of queries.
_RETRIEVE_BLOCK = re.compile(r"<retrieve>.*?(?:</retrieve>|\Z)", re.S)
_WHITESPACE = re.compile(r"\s+")


def tool_close(tool_tags=TOOL_TAGS) -> re.Pattern:
    """What closes a call of one of ``tool_tags``: where a step ends."""
    if tuple(tool_tags) == TOOL_TAGS:
        return TOOL_CLOSE
    return re.compile(rf"</(?:{'|'.join(re.escape(tag) for tag in tool_tags)})>")


def split_steps(trajectory: str, tool_tags=TOOL_TAGS) -> list[str]:
    """Split a tagged agent trajectory into RAPO steps, one per call of a tool of ``tool_tags`` (the built-in ones by
    default); ``"".join(steps) == trajectory``.

    Whitespace after the last step is attached to it; an all-whitespace text has no steps.
    """
    steps: list[str] = []
    position = 0
    closing = tool_close(tool_tags)
    while (match := closing.search(trajectory, position)) is not None:
        end = match.end()
        result = _RESULT_BLOCK.match(trajectory, end)
        if result is not None:
            end = result.end()
        steps.append(trajectory[position:end])
        position = end
    tail = trajectory[position:]
    if tail.strip():
        steps.append(tail)
    elif steps:
        steps[-1] += tail
    return steps


def preprocess_context(text: str, max_chars: int = 1300, system_prompt: str | None = None) -> str:
    """Normalise a context into a key or query: drop the system prompt, chat-template tokens and
    retrieved blocks, collapse whitespace, and keep the last ``max_chars`` characters."""
    if system_prompt:
        text = text.replace(system_prompt, " ", 1)
    for pattern in _SYSTEM_TURNS:
        text = pattern.sub(" ", text)
    text = _RETRIEVE_BLOCK.sub(" ", text)
    text = _SPECIAL_TOKEN.sub(" ", text)
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > max_chars:
        text = text[-max_chars:]
        # Drop a word cut in half by the window, unless it is a very long token.
        cut = text.find(" ")
        if 0 <= cut < 40:
            text = text[cut + 1 :]
    return text


def prompt_text(prompt) -> str:
    """The text of a prompt: a string as is, or a conversation's non-system message contents."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        parts = []
        for message in prompt:
            if isinstance(message, dict):
                if message.get("role") == "system":
                    continue
                content = message.get("content", "")
                if isinstance(content, list):  # multimodal-style content parts
                    content = " ".join(
                        str(part.get("text", "")) for part in content if isinstance(part, dict)
                    )
                parts.append(str(content))
            else:
                parts.append(str(message))
        return "\n".join(parts)
    raise TypeError(f"A prompt must be a string or a list of chat messages, got {type(prompt).__name__}.")


def trajectory_problem(trajectory) -> str | None:
    """Why a trajectory cannot be stored (``None`` if it can)."""
    if not isinstance(trajectory, str):
        return f"is a {type(trajectory).__name__}, not a string"
    if not trajectory.strip():
        return "is empty"
    if _RAPO_TAG.search(trajectory) is None:
        return f"has no RAPO tags (expected the agent's tagged text with some of {', '.join(KNOWN_TAGS)})"
    return None


def reward_problem(reward) -> str | None:
    """Why a reward cannot be stored (``None`` if it can)."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        return f"is {reward!r}, not a number"
    if math.isnan(value):
        return "is NaN"
    if math.isinf(value):
        return "is infinite"
    return None


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()


def trajectory_id(question_id: str, trajectory: str) -> str:
    """Deterministic id of a trajectory: re-adding the same one yields the same records."""
    return _digest(question_id, trajectory)[:24]


def record_id(traj_id: str, step_index: int) -> str:
    """Deterministic id of one step record."""
    return f"{traj_id}-{step_index:03d}"


@dataclass(frozen=True)
class StepRecord:
    """One stored step: ``key`` is embedded, ``value`` is what a retrieval inserts."""

    record_id: str
    key: str
    value: str
    reward: float
    question_id: str
    step_index: int
    num_steps: int
    source: str
    trajectory_id: str
    created_at: str


def step_records(
    trajectory: str,
    reward: float,
    question_id: str,
    question: str = "",
    source: str = "offline",
    key_max_chars: int = 1300,
    system_prompt: str | None = None,
    created_at: str | None = None,
    tool_tags=TOOL_TAGS,
) -> list[StepRecord]:
    """The records of one trajectory: one per step (cut at ``tool_tags``' calls), keyed by the question plus the
    steps before it."""
    steps = split_steps(trajectory, tool_tags)
    traj_id = trajectory_id(question_id, trajectory)
    created_at = created_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    records = []
    prefix = question
    for index, step in enumerate(steps):
        key = preprocess_context(prefix, key_max_chars, system_prompt)
        records.append(
            StepRecord(
                record_id=record_id(traj_id, index),
                key=key,
                value=step.strip(),
                reward=float(reward),
                question_id=question_id,
                step_index=index,
                num_steps=len(steps),
                source=source,
                trajectory_id=traj_id,
                created_at=created_at,
            )
        )
        prefix = f"{prefix}\n{step}" if prefix else step
    return records
