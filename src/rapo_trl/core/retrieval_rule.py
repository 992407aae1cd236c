"""When a RAPO rollout retrieves, in one place; torch-free, called by the rollout engine, the trainer and RAPOConfig.

- Which rows may: the first ``num_hybrid_generations`` rows of each group (``is_hybrid_row``).
- With what probability: p, constant or decayed over training (``scheduled_retrieve_prob``).
- Where: at the step boundaries named in ``retrieve_at`` (``RETRIEVAL_BOUNDARIES``): after each completed tool step
  (the paper), and once the policy closes its plan, for which the first turn is held at the plan's end
  (``holds_plan_turn``, ``boundaries_reached``). Each hybrid row that reaches a boundary untruncated draws one coin
  (``rows_that_retrieve``), in boundary order, from the engine's seeded generator.
- In which groups: every group, or with ``retrieve_failed_groups_max_reward`` only those whose on-policy rows all
  failed (``failed_groups``, ``guided_flags``).

Which record a retrieval inserts is the store's half of the rule, :func:`rapo_trl.store.selection.pick`: the highest
stored reward among the ``top_k`` nearest keys (ties: the most similar), the fallback text when that reward is not
above ``min_reward``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

RETRIEVAL_BOUNDARIES = ("tool_step", "plan")
"""Where a hybrid rollout may retrieve: after each completed tool step (paper), or once the policy has closed its
plan (``RolloutConfig.plan_stop``) in its first turn, before it writes its first tool call."""


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
    """``retrieve_at`` as a tuple without repeats; raises unless it names one or more of ``RETRIEVAL_BOUNDARIES``."""
    named = [retrieve_at] if isinstance(retrieve_at, str) else list(retrieve_at)
    if not named or any(boundary not in RETRIEVAL_BOUNDARIES for boundary in named):
        raise ValueError(f"retrieve_at takes one or more of {RETRIEVAL_BOUNDARIES}, got {retrieve_at!r}.")
    return tuple(dict.fromkeys(named))


def holds_plan_turn(can_retrieve: bool, retrieve_at: Sequence[str], hybrid: Iterable[bool]) -> bool:
    """Whether a rollout's first turn also stops at the plan's end: only when it may retrieve there and holds a hybrid
    row. The rows that do not retrieve at the plan go on as if the turn had not stopped."""
    return can_retrieve and "plan" in retrieve_at and any(hybrid)


def boundaries_reached(planned: Iterable[int], tool_steps: Iterable[int], retrieve_at: Sequence[str]) -> dict[int, str]:
    """Row -> the boundary it reached this turn, plan rows first: the rows that closed their plan, and, with
    ``"tool_step"`` in ``retrieve_at``, the rows whose tool step completed."""
    reached = {row: "plan" for row in planned}
    if "tool_step" in retrieve_at:
        reached.update((row, "tool_step") for row in tool_steps)
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
