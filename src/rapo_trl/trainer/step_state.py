"""One step's state across TRL's hooks.

TRL calls ``rollout_func``, then ``_calculate_rewards``, then returns from ``_generate_and_score_completions``;
RAPO's per-row state (retrievals, entropies, F_ret) must reach the last two unchanged. ``StepState`` carries the
step from its input rows to its advantages and checks every hand-over, so a TRL change in how often or in which
order these hooks run fails loudly instead of training as plain GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rapo_trl.rollout import RolloutRow
from rapo_trl.trainer.rewards import weighted_rewards

HOOKS_CHANGED = (
    "This TRL version calls GRPOTrainer's hooks differently from the one RAPOTrainer was written for "
    "(see rapo_trl.internals); RAPO's retrieval terms would be lost. "
)


class RolloutHandOverError(RuntimeError):
    """A hook after the rollout did not get the rollout it belongs to."""


@dataclass
class StepState:
    """One call of ``_generate_and_score_completions`` (or a bare ``rollout_func`` call): its input rows, then the
    hybrid rows the rollout made of them, then their weighted rewards."""

    rows: list[RolloutRow] | None = None
    """The rollout's rows, set once by ``rolled_out``."""
    mode: str = "train"
    """``"train"`` or ``"eval"``."""
    rewards: torch.Tensor | None = None
    """Weighted reward of every row of every process (TRL gathers them), set once by ``score``."""
    replaced: dict[int, dict] = field(default_factory=dict)
    """Dynamic sampling: local row index -> the training row whose prompt the rollout put there (already written
    into the step's ``inputs``)."""
    inputs: list[dict] | None = None
    """The step's input rows, the list TRL scores next (``None`` when ``rollout_func`` is called on its own)."""
    prompts: list | None = None
    """The prompts as the rollout got them: with an environment, each row's ``prompt`` with its ``reset``
    observation appended (TRL leaves the input rows as they were)."""

    def rolled_out(self, rows: list[RolloutRow], mode: str, replaced: dict[int, dict]) -> None:
        if self.rows is not None:
            raise RolloutHandOverError("RAPO: rollout_func ran twice before its completions were scored.")
        self.rows, self.mode, self.replaced = rows, mode, replaced
        for index, row in replaced.items():  # TRL scores (and logs) the step's inputs next: the rows now there
            self.inputs[index] = row

    def apply_replacements(self, inputs: list[dict], prompts: list) -> None:
        """Check the step's ``inputs`` hold the replacement rows and put their prompts into TRL's ``prompts`` (in
        place: TRL logs that list after scoring), so reward functions see each row's own prompt and answer."""
        for index, row in self.replaced.items():
            if inputs[index] is not row:
                raise RolloutHandOverError(
                    HOOKS_CHANGED + f"_calculate_rewards got input row {index} other than the one dynamic sampling "
                    "put there (the step's inputs were copied or rebuilt after the rollout)."
                )
            prompts[index] = row["prompt"]

    def score(self, completion_ids: list[list[int]], rewards_per_func: torch.Tensor, weights: torch.Tensor) -> None:
        """Check TRL is scoring these rows, in this order, once; keep the weighted rewards."""
        if self.rewards is not None:
            raise RolloutHandOverError(HOOKS_CHANGED + "_calculate_rewards ran twice for one rollout.")
        if len(completion_ids) != len(self.rows):
            raise RolloutHandOverError(
                HOOKS_CHANGED + f"_calculate_rewards got {len(completion_ids)} completions for a rollout of "
                f"{len(self.rows)} rows."
            )
        for index, (ids, row) in enumerate(zip(completion_ids, self.rows)):
            if list(ids) != row.completion_ids:
                raise RolloutHandOverError(
                    HOOKS_CHANGED + f"completion {index} given to _calculate_rewards is not row {index} of the "
                    "rollout (reordered or rewritten)."
                )
        self.rewards = weighted_rewards(rewards_per_func, weights)

    def check_scored(self, n_advantages: int) -> None:
        if self.rows is None:
            raise RolloutHandOverError("RAPO: GRPOTrainer scored completions without calling rollout_func; "
                                       "RAPO's rollout never ran (see rapo_trl.internals).")
        if self.rewards is None:
            raise RolloutHandOverError(HOOKS_CHANGED + "_calculate_rewards never ran for this rollout.")
        if n_advantages != len(self.rows):
            raise RolloutHandOverError(
                HOOKS_CHANGED + f"{n_advantages} advantages for a rollout of {len(self.rows)} rows."
            )
