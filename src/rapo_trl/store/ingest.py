"""Validating trajectories before anything is written, keeping the top-K per question, and cutting the
records into write batches."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rapo_trl.store.steps import StepRecord, reward_problem, trajectory_problem

_SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class Trajectory:
    """A validated trajectory with its outcome reward and question."""

    text: str
    reward: float
    question_id: str
    question: str = ""
    position: int = field(default=-1, compare=False)
    """The row's position in the validated input (-1: not from ``validate_trajectories``)."""


def validate_trajectories(
    trajectories: Sequence,
    rewards: Sequence,
    question_ids: Sequence,
    prompts: Sequence[str] | None = None,
    on_invalid: str = "raise",
) -> tuple[list[Trajectory], list[str]]:
    """Check every row first, so a bad row aborts before anything is stored.

    Returns the valid rows and one message per skipped row (``on_invalid="skip"``); with
    ``on_invalid="raise"`` any bad row raises a ``ValueError`` listing the first problems.
    """
    if on_invalid not in ("raise", "skip"):
        raise ValueError(f"on_invalid must be 'raise' or 'skip', got {on_invalid!r}.")
    lengths = {"trajectories": len(trajectories), "rewards": len(rewards), "question_ids": len(question_ids)}
    if prompts is not None:
        lengths["prompts"] = len(prompts)
    if len(set(lengths.values())) > 1:
        raise ValueError(f"Trajectory inputs differ in length: {lengths}; nothing was stored.")
    rows: list[Trajectory] = []
    problems: list[str] = []
    for index, (text, reward, question_id) in enumerate(
        zip(trajectories, rewards, question_ids, strict=True)
    ):
        row_problems = []
        if (problem := trajectory_problem(text)) is not None:
            row_problems.append(f"trajectory {problem}")
        if (problem := reward_problem(reward)) is not None:
            row_problems.append(f"reward {problem}")
        if question_id is None or str(question_id).strip() == "":
            row_problems.append("question id is missing")
        if row_problems:
            problems.append(f"row {index}: {', '.join(row_problems)}")
            continue
        question = "" if prompts is None else str(prompts[index])
        rows.append(Trajectory(text, float(reward), str(question_id), question, index))
    if problems and on_invalid == "raise":
        shown = "; ".join(problems[:_SHOWN_PROBLEMS])
        more = f" (and {len(problems) - _SHOWN_PROBLEMS} more)" if len(problems) > _SHOWN_PROBLEMS else ""
        raise ValueError(f"{len(problems)} invalid trajectory row(s), nothing was stored: {shown}{more}.")
    return rows, problems


def keep_top_k(rows: list[Trajectory], k: int | None) -> list[Trajectory]:
    """Distinct trajectories per question, the ``k`` best by reward (earlier rows win ties); a text sampled twice
    counts once, at its best reward (a reward function need not be deterministic: an environment's, a judge's).

    ``k=None`` keeps all distinct trajectories. Questions keep their first-seen order.
    """
    if k is not None and k < 1:
        raise ValueError(f"keep_top_k must be >= 1 or None, got {k}.")
    groups: dict[str, list[Trajectory]] = {}
    for row in rows:
        groups.setdefault(row.question_id, []).append(row)
    kept: list[Trajectory] = []
    for group in groups.values():
        ranked = sorted(group, key=lambda row: -row.reward)  # stable: ties keep input order
        distinct: dict[str, Trajectory] = {}
        for row in ranked:
            distinct.setdefault(row.text, row)  # a repeated text keeps its best-ranked row
        kept.extend(list(distinct.values()) if k is None else list(distinct.values())[:k])
    return kept


def is_finite(value) -> bool:
    """Whether ``value`` is a finite number (a policy's reward may be anything a reward function returned)."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def question_aligned_batches(records: Sequence[StepRecord], size: int,
                             limit: int | None = None) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` slices of about ``size`` records, each holding whole questions: a build killed between
    writes leaves each question with all its records or none, so a resumed build that skips the questions it finds
    stored skips only finished ones. A question of more than ``size`` records is a slice of its own, past ``size``;
    only one of more than ``limit`` records (the most one Chroma call takes; default no limit) is cut, into slices
    of ``limit``."""
    limit = max(size, len(records)) if limit is None else limit
    size = min(size, limit)
    start = 0
    while start < len(records):
        stop = start
        while stop < len(records):
            question_end = stop + 1
            while question_end < len(records) and records[question_end].question_id == records[stop].question_id:
                question_end += 1
            if question_end - start > size and stop > start:
                break  # the next question starts the next slice
            stop = min(question_end, start + limit)
            if question_end - start >= size:
                break
        yield start, stop
        start = stop
