"""When a RAPO rollout retrieves, in one place; torch-free, called by the rollout engine, the trainer and RAPOConfig.

- Which groups: every group, or with ``retrieve_failed_groups_max_reward`` only those whose on-policy rows all
  failed (``failed_groups``, ``guided_flags``; the trainer rolls those rows out first, ``trainer/step_rollout.py``).
- Which rows: the first ``num_hybrid_generations`` rows of each group (``is_hybrid_row``).
- Where: at the step boundaries that the triggers named in ``retrieve_at`` answer (``RETRIEVAL_TRIGGERS``). Every
  row reaches the start once, before the policy writes anything (``"start"``, ``boundaries_at_start``); then the
  engine reports each turn's boundaries: a row closed its plan in its first turn (``"plan"``; the first turn is
  then held at the plan's end, ``holds_plan_turn``), or completed its n-th tool step (``"tool_step"``).
  ``boundaries_reached`` keeps those where a named trigger fires.
- With what probability: p, constant or decayed over training (``scheduled_retrieve_prob``). Each hybrid row that
  reaches a boundary untruncated draws one coin (``rows_that_retrieve``), in boundary order, from the engine's
  seeded generator; on-policy rows draw none.

Which record a retrieval inserts is the store's half of the rule, :func:`rapo_trl.store.selection.pick`: the highest
stored reward among the ``top_k`` nearest keys and any as near as the k-th (ties: the most similar), the fallback text when that reward is not
above ``min_reward``.

A new ``retrieve_at`` value is one entry of ``RETRIEVAL_TRIGGERS`` (a boundary, and on which of a row's boundaries
of that kind it fires), with its test in ``tests/core/test_retrieval_rule.py``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

RETRIEVAL_BOUNDARIES = ("tool_step", "plan", "start")
"""The step boundaries the engine reports, and a ``RetrievalEvent``'s ``boundary``: after a completed tool step
(the paper), once the policy has closed its plan (``RolloutConfig.plan_stop``) in its first turn, before it writes
its first tool call, or at the start of the completion, before the policy writes anything."""


def every_time(nth: int) -> bool:
    """Fires at each of a row's boundaries of its kind."""
    return True


def first_time(nth: int) -> bool:
    """Fires at a row's first boundary of its kind only."""
    return nth == 1


@dataclass(frozen=True)
class RetrievalTrigger:
    """One ``retrieve_at`` value: at which of a hybrid row's step boundaries it draws a retrieval."""

    boundary: str
    """The boundary it answers (one of ``RETRIEVAL_BOUNDARIES``)."""
    fires: Callable[[int], bool] = every_time
    """Whether it fires at a row's n-th boundary of that kind (n counts from 1)."""
    with_json_tools: bool = True
    """Whether a rollout with JSON tool calls can retrieve there: a JSON turn ends at the chat template's
    end-of-turn token only, never at a plan's end, and a stored first step is tagged text, not a turn of the chat."""
    as_own_step: bool = True
    """Whether a stored step inserted there can read as the policy's own step (``retrieved_step_as_own``): not after
    the policy's plan, since a stored step opens with a plan of its own."""


RETRIEVAL_TRIGGERS: dict[str, RetrievalTrigger] = {
    "tool_step": RetrievalTrigger("tool_step"),
    "plan": RetrievalTrigger("plan", first_time, with_json_tools=False, as_own_step=False),
    "first_tool_step": RetrievalTrigger("tool_step", first_time),
    "start": RetrievalTrigger("start", first_time, with_json_tools=False),
}
"""``retrieve_at`` values: ``"tool_step"``, after each completed tool step (the paper); ``"plan"``, once the policy
closes its plan in its first turn, before its first tool call; ``"first_tool_step"``, after a row's first completed
tool step only (one stored step to get the row going, then the policy on its own); ``"start"``, before the policy
writes anything: a stored first step begins the completion (with ``retrieved_step_as_own``, an off-policy prefix)."""


def is_hybrid_row(global_index: int, num_generations: int, num_hybrid: int) -> bool:
    """The first ``num_hybrid`` rows of each group of ``num_generations`` are hybrid."""
    return global_index % num_generations < num_hybrid


def scheduled_retrieve_prob(start: float, final: float | None, step: int, max_steps: int) -> float:
    """p after ``step`` of ``max_steps`` optimizer steps: ``start`` throughout (``final`` None, or no step count),
    else decayed linearly from ``start`` to ``final`` at the last step."""
    if final is None or not max_steps:
        return start
    progress = min(1.0, step / max_steps)
    return final + (start - final) * (1.0 - progress)


def checked_boundaries(retrieve_at: str | Iterable[str]) -> tuple[str, ...]:
    """``retrieve_at`` as a tuple without repeats; raises unless it names one or more of ``RETRIEVAL_TRIGGERS``."""
    named = [retrieve_at] if isinstance(retrieve_at, str) else list(retrieve_at)
    if not named or any(name not in RETRIEVAL_TRIGGERS for name in named):
        raise ValueError(f"retrieve_at takes one or more of {tuple(RETRIEVAL_TRIGGERS)}, got {retrieve_at!r}.")
    return tuple(dict.fromkeys(named))


def check_json_tools_reach(retrieve_at: Sequence[str]) -> None:
    """Raises unless a rollout with JSON tool calls reaches every boundary ``retrieve_at`` names."""
    reachable = [name for name, trigger in RETRIEVAL_TRIGGERS.items() if trigger.with_json_tools]
    if any(name not in reachable for name in retrieve_at):
        raise ValueError(f"With JSON tool calls a hybrid rollout retrieves after tool steps only: retrieve_at must be "
                         f"among {reachable}, got {list(retrieve_at)}.")


def check_own_step_reach(retrieve_at: Sequence[str]) -> None:
    """Raises unless a stored step inserted at every boundary ``retrieve_at`` names can read as the policy's own."""
    allowed = [name for name, trigger in RETRIEVAL_TRIGGERS.items() if trigger.as_own_step]
    if any(name not in allowed for name in retrieve_at):
        raise ValueError(f"retrieved_step_as_own inserts a stored step, which opens with a plan of its own, as the "
                         f"policy's step: retrieve_at must be among {allowed}, got {list(retrieve_at)}.")


def holds_plan_turn(can_retrieve: bool, retrieve_at: Sequence[str], hybrid: Iterable[bool]) -> bool:
    """Whether a rollout's first turn also stops at the plan's end: only when it may retrieve there and holds a hybrid
    row. The rows that do not retrieve at the plan go on as if the turn had not stopped."""
    at_plan = any(RETRIEVAL_TRIGGERS[name].boundary == "plan" for name in retrieve_at)
    return can_retrieve and at_plan and any(hybrid)


def boundaries_at_start(rows: int, retrieve_at: Sequence[str]) -> dict[int, str]:
    """Row -> ``"start"`` for each of ``rows`` rows when a trigger of ``retrieve_at`` answers the start: every row
    reaches it once, before the policy writes anything (``rows_that_retrieve`` keeps the hybrid ones)."""
    at_start = any(RETRIEVAL_TRIGGERS[name].boundary == "start" and RETRIEVAL_TRIGGERS[name].fires(1)
                   for name in retrieve_at)
    return dict.fromkeys(range(rows), "start") if at_start else {}


def boundaries_reached(planned: Iterable[int], tool_steps: Mapping[int, int],
                       retrieve_at: Sequence[str]) -> dict[int, str]:
    """Row -> the boundary it reached this turn where a trigger of ``retrieve_at`` fires, plan rows first.
    ``planned``: the rows that closed their plan; ``tool_steps``: row -> its tool steps so far, for the rows whose
    tool step completed this turn."""
    triggers = [RETRIEVAL_TRIGGERS[name] for name in retrieve_at]
    reached = {}
    for boundary, nth_by_row in (("plan", dict.fromkeys(planned, 1)), ("tool_step", tool_steps)):
        for row, nth in nth_by_row.items():
            if any(trigger.boundary == boundary and trigger.fires(nth) for trigger in triggers):
                reached[row] = boundary
    return reached


def rows_that_retrieve(reached: dict[int, str], rows: Sequence, rng: random.Random, retrieve_prob: float) -> list[int]:
    """The rows of ``reached`` that retrieve: each hybrid, untruncated row draws once from ``rng`` (in ``reached``'s
    order, so a seed gives the same rollouts) and retrieves with probability ``retrieve_prob``."""
    return [row for row in reached
            if rows[row].is_hybrid and not rows[row].truncated and rng.random() < retrieve_prob]


def failed_groups(rewards: Sequence[float], group_size: int, threshold: float) -> list[bool]:
    """Per group of ``group_size`` consecutive rows: True when every scored row (NaN: not scored, e.g. a hybrid row
    not yet rolled out) has a reward at or below ``threshold``. A group with no scored row is not failed."""
    verdicts = []
    for first in range(0, len(rewards), group_size):
        scored = [float(reward) for reward in rewards[first : first + group_size] if not math.isnan(float(reward))]
        verdicts.append(bool(scored) and all(reward <= threshold for reward in scored))
    return verdicts


def guided_flags(failed: Sequence[bool], rows: Iterable[int], offset: int, group_size: int) -> list[bool]:
    """For this process's ``rows`` (local indices; ``offset``: its first global row): whether the row's group failed,
    i.e. whether the row may retrieve under ``retrieve_failed_groups_max_reward``."""
    return [bool(failed[(offset + row) // group_size]) for row in rows]
