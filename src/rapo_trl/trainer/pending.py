"""What one rollout hands to the hooks TRL calls after it, and the ratio shift handed to the loss forward.

TRL calls ``rollout_func``, then ``_calculate_rewards``, then returns from ``_generate_and_score_completions``;
RAPO's per-row state (retrievals, entropies, F_ret) must reach the last two unchanged. It travels in one
object that checks every hand-over, so a TRL change in how often or in which order these hooks run fails
loudly instead of training as plain GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rapo_trl.rollout import RolloutRow

HOOKS_CHANGED = (
    "This TRL version calls GRPOTrainer's hooks differently from the one RAPOTrainer was written for "
    "(see rapo_trl.internals); RAPO's retrieval terms would be lost. "
)


class RolloutHandOverError(RuntimeError):
    """A hook after the rollout did not get the rollout it belongs to."""


@dataclass
class PendingRollout:
    """One call's hybrid rows, from ``rollout_func`` until advantages are computed."""

    rows: list[RolloutRow]
    mode: str
    """``"train"`` or ``"eval"``."""
    rewards: torch.Tensor | None = None
    """Weighted reward of every row of every process (TRL gathers them), set once by ``score``."""
    replaced: dict[int, dict] = field(default_factory=dict)
    """Dynamic sampling: local row index -> the training row whose prompt the rollout put there (already written
    into the step's ``inputs``)."""

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
        self.rewards = (rewards_per_func * weights.to(rewards_per_func.device)).nansum(dim=1)

    def check_scored(self, n_advantages: int) -> None:
        if self.rewards is None:
            raise RolloutHandOverError(HOOKS_CHANGED + "_calculate_rewards never ran for this rollout.")
        if n_advantages != len(self.rows):
            raise RolloutHandOverError(
                HOOKS_CHANGED + f"{n_advantages} advantages for a rollout of {len(self.rows)} rows."
            )


@dataclass
class PendingRatioShift:
    """The per-row shift log(1 + m F_ret) waiting for the loss's one forward pass.

    With aligned generation TRL passes no old log-probs and takes ``per_token_logps.detach()`` after that
    forward; the shaped ratio needs them lowered by the shift, so the forward's override writes them into
    the loss's inputs, where ``_compute_loss`` reads them next.
    """

    inputs: dict
    shift: torch.Tensor
    """[B, 1]."""
    used: int = 0

    def apply(self, per_token_logps: torch.Tensor) -> None:
        self.used += 1
        if self.used > 1:
            raise RolloutHandOverError(
                HOOKS_CHANGED + "_compute_loss ran more than one forward; the shaped old log-probs are ambiguous."
            )
        # The off-policy mask compares with the sampler's log-probs (here: this forward's); only the clipped ratio
        # is shaped.
        self.inputs.setdefault("sampling_per_token_logps", per_token_logps.detach())
        self.inputs["old_per_token_logps"] = per_token_logps.detach() - self.shift

    def check_used(self) -> None:
        if self.used != 1:
            raise RolloutHandOverError(
                HOOKS_CHANGED + "_compute_loss did not run _get_per_token_logps_and_entropies; the shaped "
                "importance ratio was not applied."
            )
