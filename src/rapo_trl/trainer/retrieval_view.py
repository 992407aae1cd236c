"""Retrievals you can see: what the stored steps a step's hybrid rollouts were shown were, and how the rows that were
shown one scored beside the on-policy rows, and where the step's advantage went (docs/metrics.md). Logged once per
training step, after scoring."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rapo_trl.core.advantage_baselines import shown_a_stored_step
from rapo_trl.protocol import ANSWER_OPEN
from rapo_trl.rollout import RolloutRow
from rapo_trl.trainer.metrics import gathered_mean, gathered_sum, means_where_defined


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


def advantage_sums(rows: Sequence[RolloutRow], advantages: torch.Tensor) -> dict[str, float]:
    """Sums over this process's rows of where the step's advantage went (a row's mean where advantages are per
    token): all positive advantage, that of rows shown a stored step and of on-policy rows; the on-policy rows'
    advantage, their count and how many have A < 0."""
    per_row = advantages.detach().float()
    if per_row.dim() > 1:
        per_row = per_row.mean(dim=1)
    positive = per_row.clamp(min=0)
    shown = torch.tensor([shown_a_stored_step(row) for row in rows], dtype=torch.bool, device=per_row.device)
    on_policy = torch.tensor([not row.is_hybrid for row in rows], dtype=torch.bool, device=per_row.device)
    return {"credit": float(positive.sum()), "credit_shown": float(positive[shown].sum()),
            "credit_on_policy": float(positive[on_policy].sum()), "on_policy_sum": float(per_row[on_policy].sum()),
            "on_policy": float(on_policy.sum()), "on_policy_negative": float((per_row[on_policy] < 0).sum())}


def advantage_metrics(sums: dict[str, float]) -> dict[str, float]:
    """What the step's advantage credits, from every process's ``advantage_sums``: positive advantage mass on rows
    shown a stored step and on on-policy rows, and their share of all of it; the on-policy rows' advantage sum and
    share with A < 0 (left out where the step has no on-policy row, and the share where it gives no credit)."""
    metrics = {"rapo/positive_advantage_mass_retrieved": sums["credit_shown"],
               "rapo/positive_advantage_mass_on_policy": sums["credit_on_policy"]}
    if sums["credit"] > 0:
        metrics["rapo/positive_advantage_share_retrieved"] = sums["credit_shown"] / sums["credit"]
    if sums["on_policy"] > 0:
        metrics["rapo/on_policy_advantage_sum"] = sums["on_policy_sum"]
        metrics["rapo/on_policy_negative_share"] = sums["on_policy_negative"] / sums["on_policy"]
    return metrics


def retrieval_view_metrics(rows: Sequence[RolloutRow], question_ids: Sequence[str | None] | None,
                           all_rewards: torch.Tensor, accelerator,
                           advantages: torch.Tensor | None = None) -> dict[str, float]:
    """The step's retrieval shares, its rewards by retrieval and, given ``advantages``, where its advantage went,
    over every process's rows (``all_rewards``: every process's rows, this process's at its ``process_index``-th
    slice). Every process calls it (it gathers)."""
    start = accelerator.process_index * len(rows)
    own, answer = stored_steps_shown(rows, question_ids)
    retrieved, on_policy = rewards_by_retrieval(rows, all_rewards[start : start + len(rows)].tolist())
    metrics = means_where_defined(
        {"rapo/retrieved_own_question_share": own, "rapo/retrieved_answer_share": answer,
         "rapo/reward_hybrid_retrieved": retrieved, "rapo/reward_on_policy": on_policy},
        lambda values: gathered_mean(accelerator, values), lambda value: gathered_sum(accelerator, value))
    if advantages is not None:  # this process's rows' advantages, as TRL leaves them after its split
        sums = advantage_sums(rows, advantages)
        metrics.update(advantage_metrics({name: gathered_sum(accelerator, value) for name, value in sums.items()}))
    return metrics
