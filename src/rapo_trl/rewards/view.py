"""What reward functions see of a rollout row: the policy's own tokens.

Lives beside the rewards rather than in the trainer because it defines what a reward scores; the trainer
(scoring) and store growth (the text a grown trajectory keeps) both read it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rollout types import nothing from here; a runtime import would only add a dependency
    from rapo_trl.rollout import RolloutRow


def policy_view(row: RolloutRow, keep_retrieved: bool = False) -> list[int]:
    """Completion ids with retrieved spans removed (by token span, not by pattern)."""
    if keep_retrieved or not row.retrievals:
        return row.completion_ids
    keep = [True] * len(row.completion_ids)
    for event in row.retrievals:
        keep[event.start : event.end] = [False] * (event.end - event.start)
    return [t for t, k in zip(row.completion_ids, keep) if k]
