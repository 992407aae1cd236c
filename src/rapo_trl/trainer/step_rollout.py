"""The step's rollout stage: which rows roll out how, in one function that knows nothing of TRL.

One of three ways, chosen by the config: plain (every row in one engine call); guided for failed groups
(``retrieve_failed_groups_max_reward``: every row on-policy first, the on-policy rows scored, then the hybrid rows of
groups whose on-policy rows all failed again, retrieving; BREAD, Guide-GRPO); and, after either, DAPO's dynamic
sampling (flat groups replaced by groups of prompts drawn from the training set,
`rapo_trl.trainer.dynamic_sampling`). What it needs from the trainer
(scoring, gathering, drawing and rolling out prompts) comes in as ``StepHooks``, so every process runs the same
collective calls in the same order whatever its rows hold.

p for the step (``RAPOConfig.retrieve_prob_at``) comes in as ``retrieve_prob`` and goes to each
``HybridRolloutEngine.roll_out`` call as it is; there each hybrid row draws with it at the boundaries of
``RAPOConfig.retrieve_at`` (the rule: ``rapo_trl.core.retrieval_rule``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from rapo_trl.config import RAPOConfig
from rapo_trl.core.retrieval_rule import failed_groups, guided_flags
from rapo_trl.rollout import HybridRolloutEngine, RolloutRow, RolloutStats
from rapo_trl.trainer.dynamic_sampling import dynamic_sampling_metrics, resample_flat_groups, summed_stats


@dataclass
class StepHooks:
    """What the rollout stage asks of the trainer. Every callable that gathers is called on every process."""

    score: Callable[[list[dict], list[RolloutRow]], torch.Tensor]
    """Weighted rewards of this process's rows for their training rows (gathers)."""
    gather: Callable[[torch.Tensor], torch.Tensor]
    """A tensor of every process's values, in process order."""
    mean: Callable[..., float]
    """A (weighted) mean over processes."""
    total: Callable[[float], float]
    """A sum over processes."""
    draw: Callable[[int, int, set[str]], list[dict]] | None = None
    """``(n, round, exclude)`` -> training rows for dynamic sampling (gathers)."""
    roll_out_rows: Callable[[list[dict], list[bool]], tuple[list[RolloutRow], RolloutStats]] | None = None
    """Training rows rolled out with the given hybrid flags, for dynamic sampling."""
    extra_tokens: list[int] = field(default_factory=list)
    """Completion tokens of each ``roll_out_rows`` call, appended by it (TRL counts only the rows trained on)."""


@dataclass
class StepRollout:
    """What the rollout stage produced for this process's rows."""

    rows: list[RolloutRow]
    stats: RolloutStats
    replaced: dict[int, dict] = field(default_factory=dict)
    """Local row index -> the training row whose prompt now fills it (dynamic sampling)."""
    metrics: dict[str, float] = field(default_factory=dict)


def question_ids(inputs: Sequence[dict] | None) -> list[str | None] | None:
    """Each training row's ``question_id`` (as a string; ``None`` where it has none), or ``None`` without rows."""
    if inputs is None:
        return None
    return [None if row.get("question_id") is None else str(row["question_id"]) for row in inputs]


def roll_out_step(engine: HybridRolloutEngine, inputs: Sequence[dict] | None, prompt_ids: list, prefixes: list[str],
                  hybrid: list[bool], *, group_size: int, offset: int, retrieve_prob: float, args: RAPOConfig,
                  hooks: StepHooks, row_tools=None) -> StepRollout:
    """Roll out a training step's rows (``offset``: this process's first global row) as ``args`` says, hybrid rows
    retrieving with probability ``retrieve_prob``; ``row_tools``: each row's own JSON tools (its environment's), which
    only the plain rollout takes."""
    if args.retrieve_failed_groups_max_reward is not None and engine.store is not None:
        step = _guided_for_failed_groups(engine, _need(inputs, "retrieve_failed_groups_max_reward"), prompt_ids,
                                         prefixes, hybrid, group_size, offset, args.retrieve_failed_groups_max_reward,
                                         retrieve_prob, hooks)
    else:
        rollout = engine.roll_out(prompt_ids, prefixes, hybrid, retrieval_enabled=True,
                                  question_ids=question_ids(inputs), retrieve_prob=retrieve_prob, row_tools=row_tools)
        step = StepRollout(rollout.rows, rollout.stats)
    if args.dynamic_sampling_max_rounds:
        inputs = _need(inputs, "dynamic_sampling_max_rounds")
        resampled = resample_flat_groups(step.rows, inputs, hybrid, hooks.score(list(inputs), step.rows),
                                         group_size, args.dynamic_sampling_max_rounds, hooks.draw, hooks.roll_out_rows,
                                         hooks.score, lambda n: int(hooks.total(float(n))))
        step.rows, step.replaced = resampled.rows, resampled.replaced
        step.stats = summed_stats(step.stats, resampled.stats)
        step.metrics.update(dynamic_sampling_metrics(resampled, sum(hooks.extra_tokens), hooks.mean, hooks.total))
    return step


def _need(inputs, option: str) -> Sequence[dict]:
    if inputs is None:
        from rapo_trl.trainer.step_state import RolloutHandOverError

        raise RolloutHandOverError(f"RAPO: {option} needs the step's input rows; rollout_func ran outside "
                                   "_generate_and_score_completions.")
    return inputs


def _guided_for_failed_groups(engine: HybridRolloutEngine, inputs, prompt_ids, prefixes, hybrid, group_size, offset,
                              threshold, retrieve_prob: float, hooks: StepHooks) -> StepRollout:
    # Every row rolls out on-policy in one batch (a batch of 2n rows decodes in about the time of n on a CPU). Only
    # the on-policy rows' rewards decide whether a group failed, so a hybrid row of a group that did not fail is an
    # on-policy rollout independent of that verdict, as it would be if rolled out after it; the hybrid rows of failed
    # groups roll out again, guided.
    own = [i for i, flag in enumerate(hybrid) if not flag]
    mixed = [i for i, flag in enumerate(hybrid) if flag]
    on_policy = engine.roll_out(prompt_ids, prefixes, [False] * len(hybrid), retrieval_enabled=False,
                                retrieve_prob=retrieve_prob)
    rows = list(on_policy.rows)
    # Each process holds whole groups with on-policy rows (RAPOConfig checks), so each has rows to score here.
    rewards = torch.full((len(hybrid),), float("nan"))
    rewards[own] = hooks.score([inputs[i] for i in own], [rows[i] for i in own]).float().cpu()
    # The threshold at the rewards' own precision (float32), as a tensor comparison would take it.
    threshold = torch.tensor(threshold, dtype=rewards.dtype).item()
    failed = failed_groups(hooks.gather(rewards).tolist(), group_size, threshold)
    again = [i for i, guided in zip(mixed, guided_flags(failed, mixed, offset, group_size)) if guided]
    stats = on_policy.stats
    if again:  # rollouts are not collective (vLLM runs at tensor parallel size 1), so a process may skip this call
        ids = question_ids(inputs)
        guided_rollout = engine.roll_out([prompt_ids[i] for i in again], [prefixes[i] for i in again],
                                         [True] * len(again), retrieval_enabled=True,
                                         question_ids=[ids[i] for i in again], retrieve_prob=retrieve_prob)
        for index, row in zip(again, guided_rollout.rows):
            rows[index] = row
        stats = summed_stats(stats, [guided_rollout.stats])
    return StepRollout(rows, stats, metrics={"rapo/guided_group_share": float(torch.tensor(failed).float().mean())})
