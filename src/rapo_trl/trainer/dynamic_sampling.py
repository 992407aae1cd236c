"""DAPO's dynamic sampling (arXiv 2503.14476): no group without reward signal when a step can replace it.

A group whose rewards are all equal has zero advantage: its rollouts cost a step's time and teach nothing. With
``RAPOConfig.dynamic_sampling_max_rounds`` above 0 the rollout replaces such a group's prompt within the same step:
prompts drawn from the training set are rolled out in place of the flat groups, scored by the trainer's reward
functions, and a candidate group whose rewards differ takes the flat group's rows, for up to that many rounds.
The pieces here know nothing of TRL; ``RAPOTrainer`` wires them to its rollout engine and reward functions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from trl.trainer.utils import nanstd

from rapo_trl.rollout import RolloutRow, RolloutStats


def groups_with_signal(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per group of ``group_size`` consecutive rows: whether its rewards differ (a non-zero advantage somewhere).

    NaN rewards (unscorable rows, which TRL leaves out of the group baseline) are ignored; a group with fewer than
    two scored rows has no signal. "Equal" is TRL's own test for ``frac_reward_zero_std``.
    """
    std = nanstd(rewards.float().view(-1, group_size), dim=1)
    return ~torch.isnan(std) & ~torch.isclose(std, torch.zeros_like(std))


def prompt_key(prompt) -> str:
    """A prompt (text or chat messages) as a comparable string."""
    return json.dumps(prompt, sort_keys=True, default=str)


@dataclass
class PromptDraw:
    """Replacement prompts from the training set: seeded by (seed, step, generation, process, round), so a run and
    its resume draw the same ones, and never a prompt in ``exclude`` unless the dataset has no other. ``generation``
    counts the generations before this one in the same optimizer step (``steps_per_generation`` below
    ``gradient_accumulation_steps``): each draws anew rather than the first one's prompts again."""

    dataset: object
    """Anything with ``len`` and integer indexing that returns a row dict (a map-style ``datasets.Dataset``)."""
    seed: int

    def __call__(self, n: int, *, step: int, process: int, round_: int, exclude: set[str],
                 generation: int = 0) -> list[dict]:
        size = len(self.dataset)
        if n <= 0 or size == 0:
            return []
        at = f"{step}.{generation}" if generation else str(step)  # a step's first generation keeps the step's seed
        rng = random.Random(f"rapo-dynamic-sampling:{self.seed}:{at}:{process}:{round_}")
        order = rng.sample(range(size), min(size, n + len(exclude)))
        rows = [self.dataset[i] for i in order]
        picked = [row for row in rows if prompt_key(row["prompt"]) not in exclude][:n]
        if len(picked) < n and len(order) < size:
            # Rows repeating an excluded prompt took places meant for other prompts: look on through the rest.
            seen = set(order)
            rest = [i for i in range(size) if i not in seen]
            rng.shuffle(rest)
            for i in rest:
                if len(picked) == n:
                    break
                row = self.dataset[i]
                if prompt_key(row["prompt"]) not in exclude:
                    picked.append(row)
        # A dataset with fewer other prompts than flat groups: repeats, of excluded prompts only if there is no other.
        pool = list(picked) or rows
        while len(picked) < n:
            picked.append(pool[len(picked) % len(pool)])
        return picked


    def for_all_processes(self, n: int, *, step: int, round_: int, exclude: set[str], rank: int,
                          gather, generation: int = 0) -> list[dict]:
        """This process's ``n`` prompts of one draw for every process (``gather``: accelerate's ``gather_object``,
        called on every process): each takes its slice, and none gets a prompt any process holds or drew, so two
        processes never train the same prompt in one step."""
        counts = gather([n])
        everyone = set().union(*gather([sorted(exclude)]))
        drawn = self(sum(counts), step=step, process=0, round_=round_, exclude=everyone, generation=generation)
        return drawn[sum(counts[:rank]):sum(counts[:rank + 1])]


@dataclass
class Resampled:
    """What dynamic sampling did to one process's rows in one step."""

    rows: list[RolloutRow]
    """The step's rows, replacement groups in the flat groups' places."""
    replaced: dict[int, dict] = field(default_factory=dict)
    """Local row index -> the training row whose prompt now fills it."""
    signal_before: list[bool] = field(default_factory=list)
    """Per local group: rewards differ, before any replacement."""
    signal_after: list[bool] = field(default_factory=list)
    rounds: int = 0
    """Extra rollout rounds run (the same on every process)."""
    extra_rows: int = 0
    """Rows rolled out in those rounds on this process."""
    stats: list[RolloutStats] = field(default_factory=list)
    """The rollout engine's stats of each extra round that rolled out rows here."""


def resample_flat_groups(
    rows: list[RolloutRow],
    inputs: Sequence[dict],
    hybrid: Sequence[bool],
    rewards: torch.Tensor,
    group_size: int,
    max_rounds: int,
    draw: Callable[[int, int, set[str]], list[dict]],
    rollout: Callable[[list[dict], list[bool]], tuple[list[RolloutRow], RolloutStats | None]],
    score: Callable[[list[dict], list[RolloutRow]], torch.Tensor],
    total_flat: Callable[[int], int],
) -> Resampled:
    """Replace the flat groups of ``rows`` (this process's rows, whole groups of ``group_size``) for up to
    ``max_rounds`` rounds.

    ``inputs`` are the rows' training rows and ``rewards`` their weighted rewards. Each round draws one prompt per
    still-flat group (``draw(n, round, exclude)``: training rows, no prompt of ``exclude``), rolls it out
    ``group_size`` times with the flat group's hybrid flags (``rollout``), scores the candidates (``score``, called
    on every process in every round, with no rows where a process has none: it may gather) and keeps a candidate
    group whose rewards differ. ``total_flat(n)`` sums the flat groups over processes, so every process runs the
    same rounds.
    """
    signal = groups_with_signal(rewards, group_size).tolist()
    result = Resampled(rows=list(rows), signal_before=list(signal))
    flat = [g for g, has_signal in enumerate(signal) if not has_signal]
    seen = {prompt_key(row["prompt"]) for row in inputs}
    for round_ in range(1, max_rounds + 1):
        if total_flat(len(flat)) == 0:
            break
        result.rounds = round_
        drawn = draw(len(flat), round_, seen)
        seen |= {prompt_key(row["prompt"]) for row in drawn}
        candidates = [row for row in drawn for _ in range(group_size)]
        flags = [hybrid[g * group_size + j] for g in flat for j in range(group_size)]
        candidate_rows, stats = rollout(candidates, flags) if candidates else ([], None)
        if stats is not None:
            result.stats.append(stats)
        result.extra_rows += len(candidate_rows)
        candidate_rewards = score(candidates, candidate_rows)  # on every process, rows or not: it may gather
        candidate_signal = groups_with_signal(candidate_rewards, group_size).tolist() if flat else []
        still_flat = []
        for k, g in enumerate(flat):
            if not candidate_signal[k]:
                still_flat.append(g)
                continue
            span = range(g * group_size, (g + 1) * group_size)
            for j, i in enumerate(span):
                result.rows[i] = candidate_rows[k * group_size + j]
                result.replaced[i] = candidates[k * group_size + j]
            signal[g] = True
        flat = still_flat
    result.signal_after = signal
    return result


def summed_stats(first: RolloutStats, extra: Sequence[RolloutStats]) -> RolloutStats:
    """The rollout stats of a step whose rollout ran in several engine calls."""
    total = RolloutStats(first.generate_seconds, first.tool_seconds, first.retrieval_seconds, first.turns,
                         dict(first.extra))
    for stats in extra:
        total.generate_seconds += stats.generate_seconds
        total.tool_seconds += stats.tool_seconds
        total.retrieval_seconds += stats.retrieval_seconds
        total.turns += stats.turns
    return total


@contextmanager
def reward_logs_left_alone(trainer):
    """Candidates are scored outside the step's batch: what reward functions log for them through ``log_extra`` /
    ``log_metric`` would misalign TRL's completions table, so it is dropped."""
    extra = {key: list(values) for key, values in trainer._pending_extra_logs.items()}
    metrics = {key: list(values) for key, values in trainer._pending_metrics.items()}
    try:
        yield
    finally:
        trainer._pending_extra_logs.clear()
        trainer._pending_extra_logs.update(extra)
        trainer._pending_metrics.clear()
        trainer._pending_metrics.update(metrics)


def dynamic_sampling_metrics(result: Resampled, extra_tokens: int, mean, total) -> dict[str, float]:
    """``dynamic_sampling/*`` over every process's groups (``mean`` and ``total`` gather, so every process calls
    it); ``extra_tokens``: completion tokens of the extra rounds' rows, kept or not (TRL counts only rows trained
    on)."""
    return {
        "dynamic_sampling/extra_completion_tokens": total(float(extra_tokens)),
        "dynamic_sampling/signal_share_before": mean([float(s) for s in result.signal_before]),
        "dynamic_sampling/signal_share_after": mean([float(s) for s in result.signal_after]),
        "dynamic_sampling/replaced_share": mean([float(a and not b) for a, b in
                                                 zip(result.signal_after, result.signal_before)]),
        "dynamic_sampling/rounds": float(result.rounds),
        "dynamic_sampling/extra_rollouts_per_group": mean([result.extra_rows / max(len(result.signal_before), 1)],
                                                          [float(len(result.signal_before))]),
    }
