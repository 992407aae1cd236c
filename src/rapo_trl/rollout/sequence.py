"""How a row's sequence grows: only by appending ids, each span recorded as a segment.

The policy's sampled ids carry mask 1 and make a policy step with its step entropy; forced ids (a tool result, a
retrieved step, a closing EOS) carry mask 0. Nothing is ever re-tokenised or cut out of a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rapo_trl.core.rows import RolloutRow, Segment
from rapo_trl.rollout.entropy import step_entropy
from rapo_trl.rollout.types import TurnOutput


@dataclass
class HeldTurn:
    """The tokens of a policy turn sampled so far, counted, with their entropies (a turn may span a plan stop)."""

    sampled: int = 0
    entropy_full: list[float] = field(default_factory=list)
    entropy_topk: list[float] = field(default_factory=list)

    def extended(self, out: TurnOutput) -> HeldTurn:
        return HeldTurn(self.sampled + len(out.token_ids), self.entropy_full + list(out.entropy_full),
                        self.entropy_topk + list(out.entropy_topk))


def append_policy_step(row: RolloutRow, out: TurnOutput, turn: HeldTurn, estimator: str, first_tokens: int) -> int:
    """Append the ids the policy just sampled (mask 1) as a policy step, ``turn`` being the whole turn so far; returns
    where the step starts. The rest of a turn held at the plan's end extends that step: one step, not two."""
    step_start = len(row.completion_ids)
    row.completion_ids.extend(out.token_ids)
    row.env_mask.extend([1] * len(out.token_ids))
    if out.logprobs is not None:
        row.logprobs = (row.logprobs or [0.0] * step_start) + list(out.logprobs)
    elif row.logprobs is not None:
        row.logprobs.extend([0.0] * len(out.token_ids))
    entropy = step_entropy(turn.entropy_full, turn.entropy_topk, estimator, first_tokens)
    if turn.sampled > len(out.token_ids):
        step = row.segments[-1]
        step.end, step.entropy = len(row.completion_ids), entropy
        _fill_post_entropy(row)  # the step grew, and so did the entropy a retrieval before it reads as 'post'
        return step.start
    row.segments.append(Segment("policy", step_start, len(row.completion_ids), entropy))
    _fill_post_entropy(row)
    return step_start


def _fill_post_entropy(row: RolloutRow) -> None:
    """The step just sampled (or extended past a plan stop) is the 'post' step of the retrievals right before it."""
    steps = row.policy_steps
    for event in row.retrievals:
        if event.after_step == len(steps) - 2:
            event.entropy_post = steps[-1].entropy


def append_forced(row: RolloutRow, ids: list[int], kind: str, budget: int) -> tuple[int, int]:
    """Append forced ids (mask 0) as a ``kind`` segment, cut to the completion ``budget`` (the row then truncated);
    returns the span they fill."""
    room = budget - len(row.completion_ids)
    if len(ids) > room:
        ids = ids[:room]
        row.truncated = True
    start = len(row.completion_ids)
    row.completion_ids.extend(ids)
    row.env_mask.extend([0] * len(ids))
    if row.logprobs is not None:
        row.logprobs.extend([0.0] * len(ids))
    if ids:
        row.segments.append(Segment(kind, start, len(row.completion_ids)))
    if len(row.completion_ids) >= budget:
        row.truncated = True
    return start, len(row.completion_ids)


def close_episode(row: RolloutRow, eos: int | None, budget: int) -> None:
    """End a row whose answer closed with a forced EOS (mask 0), so TRL counts it as terminated, not clipped
    (``completions/clipped_ratio``, ``mask_truncated_completions``). Skipped when the budget is spent."""
    if eos is not None and len(row.completion_ids) < budget:
        append_forced(row, [eos], "end", budget)
        row.truncated = False  # an EOS in the last slot still ends a finished row, not a cut one


def never_empty(row: RolloutRow, eos: int | None) -> None:
    """Give a row that sampled nothing (no room left for the policy) one forced EOS: TRL indexes
    ``completions[-1]``. The policy never produced it, so it carries mask 0 like any forced id: trained on, its
    stand-in log-prob 0 would enter the importance ratio as if the policy had been sure of it."""
    if not row.completion_ids:
        row.completion_ids, row.env_mask = [eos], [0]
        row.segments.append(Segment("end", 0, 1))
        if row.logprobs is not None:
            row.logprobs = [0.0]
