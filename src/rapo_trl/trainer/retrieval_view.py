"""Retrievals you can see: what the stored steps a step's hybrid rollouts were shown were, and how the rows that were
shown one scored beside the on-policy rows (docs/metrics.md). Logged once per training step, after scoring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from rapo_trl.core.advantage_baselines import shown_a_stored_step
from rapo_trl.protocol import ANSWER_OPEN
from rapo_trl.rollout import RolloutRow
from rapo_trl.trainer.metrics import Mean, gathered_mean, gathered_sum


def means_where_defined(values_by_name: dict[str, list[float]], mean: Mean,
                        total: Callable[[float], float]) -> dict[str, float]:
    """The mean over processes of each name's values, for the names some process has values of: a share of nothing
    is left out of the log rather than logged as 0. Every process calls it with the same names (it gathers)."""
    return {name: mean(values) for name, values in values_by_name.items() if total(float(len(values))) > 0}


def stored_steps_shown(rows: Sequence[RolloutRow], question_ids: Sequence[str | None] | None
                       ) -> tuple[list[float], list[float]]:
    """Per stored step inserted into ``rows`` (fallbacks are not stored steps): 1.0 where its record came from the
    row's own question, else 0.0 (rows with a question id, records whose question the store gave); and 1.0 where it
    holds a final answer (``<answer>``), else 0.0."""
    own, answer = [], []
    for index, row in enumerate(rows):
        question = question_ids[index] if question_ids is not None else None
        for event in row.retrievals:
            if event.is_fallback or event.text is None:
                continue
            answer.append(float(ANSWER_OPEN in event.text))
            if question is not None and event.question_id is not None:
                own.append(float(str(event.question_id) == question))
    return own, answer


def rewards_by_retrieval(rows: Sequence[RolloutRow], rewards: Sequence[float]) -> tuple[list[float], list[float]]:
    """This process's rewards of the hybrid rows shown a stored step, and of the on-policy rows (NaN left out)."""
    scored = [(row, reward) for row, reward in zip(rows, rewards, strict=True) if not math.isnan(reward)]
    return ([reward for row, reward in scored if shown_a_stored_step(row)],
            [reward for row, reward in scored if not row.is_hybrid])


def completion_columns(rows: Sequence[RolloutRow]) -> dict[str, list]:
    """Per-row columns for TRL's completions table (``log_completions``): whether the row was hybrid, how many
    stored steps it was shown, and whether one of them held a final answer; so a row's reward can be read beside
    what it was handed."""
    stored = [[event for event in row.retrievals if not event.is_fallback and event.text is not None] for row in rows]
    return {
        "rapo_hybrid": [row.is_hybrid for row in rows],
        "rapo_stored_steps_shown": [len(events) for events in stored],
        "rapo_answer_step_shown": [any(ANSWER_OPEN in event.text for event in events) for events in stored],
    }


def positive_advantage_shown_a_stored_step(rows: Sequence[RolloutRow], advantages: torch.Tensor) -> tuple[float, float]:
    """``(credit to rows shown a stored step, all credit)``: the sums of the positive advantages of this process's
    rows. Their ratio says how much of what the step reinforces was earned next to a retrieved step."""
    positive = advantages.detach().float().clamp(min=0)
    if positive.dim() > 1:  # per-token advantages: a row's credit is its mean
        positive = positive.mean(dim=1)
    shown = torch.tensor([shown_a_stored_step(row) for row in rows], dtype=torch.bool, device=positive.device)
    return float(positive[shown].sum()), float(positive.sum())


def retrieval_view_metrics(rows: Sequence[RolloutRow], question_ids: Sequence[str | None] | None,
                           all_rewards: torch.Tensor, accelerator,
                           advantages: torch.Tensor | None = None) -> dict[str, float]:
    """The step's retrieval shares and its rewards by retrieval, over every process's rows (``all_rewards``: every
    process's rows, this process's at its ``process_index``-th slice). Every process calls it (it gathers)."""
    start = accelerator.process_index * len(rows)
    own, answer = stored_steps_shown(rows, question_ids)
    retrieved, on_policy = rewards_by_retrieval(rows, all_rewards[start : start + len(rows)].tolist())
    metrics = means_where_defined(
        {"rapo/retrieved_own_question_share": own, "rapo/retrieved_answer_share": answer,
         "rapo/reward_hybrid_retrieved": retrieved, "rapo/reward_on_policy": on_policy},
        lambda values: gathered_mean(accelerator, values), lambda value: gathered_sum(accelerator, value))
    if advantages is not None:  # this process's rows' advantages, as TRL leaves them after its split
        shown_credit, credit = positive_advantage_shown_a_stored_step(rows, advantages)
        shown_credit, credit = gathered_sum(accelerator, shown_credit), gathered_sum(accelerator, credit)
        if credit > 0:
            metrics["rapo/positive_advantage_share_retrieved"] = shown_credit / credit
    return metrics
