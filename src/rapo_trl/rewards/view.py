"""What reward functions see of a rollout row: the policy's trajectory, without the retrieved blocks shown to it.

Lives beside the rewards rather than in the trainer because it defines what a reward scores; the trainer
(scoring) and store growth (the text a grown trajectory keeps) both read it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rollout types import nothing from here; a runtime import would only add a dependency
    from rapo_trl.rollout import RolloutRow


def policy_view(row: RolloutRow, keep_retrieved: bool = False) -> list[int]:
    """Completion ids with the retrieved blocks removed (by token span, not by pattern), unless ``keep_retrieved``.
    A stored step inserted as the policy's own step (``retrieved_step_as_own``) is no block: it stays, a step of the
    trajectory like the policy's (its answer is the row's answer)."""
    blocks = [] if keep_retrieved else [event for event in row.retrievals if not event.as_own]
    if not blocks:
        return row.completion_ids
    keep = [True] * len(row.completion_ids)
    for event in blocks:
        keep[event.start : event.end] = [False] * (event.end - event.start)
    return [t for t, k in zip(row.completion_ids, keep) if k]
