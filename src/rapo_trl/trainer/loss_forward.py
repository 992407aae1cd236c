"""The one forward inside TRL's loss: where RAPO's shaped ratio (1 + m F_ret) r enters it.

This is a hand-over forced by TRL's hooks. ``GRPOTrainer._compute_loss`` runs ``_get_per_token_logps_and_entropies``
once, then reads ``old_per_token_logps`` from its inputs, or takes that forward's own log-probs, detached, when the
batch holds none (one update per generation: aligned). The shaped ratio's old log-probs can only be written between
those two moments, so the forward hook writes them into the loss's own copy of the micro-batch. TRL then computes
exp(logps - shaped_old) = (1 + m F_ret) r and clips it with its own clip and dual clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rapo_trl.core.objective import shaped_old_logps
from rapo_trl.trainer.step_state import HOOKS_CHANGED, RolloutHandOverError

RETRIEVED_FRACTION_KEY = "rapo_retrieved_fraction"
"""F_ret per row in the scored batch ([B]): what the loss shapes the ratio by."""


@dataclass
class LossForward:
    """One call of TRL's loss: shapes the old log-probs once the forward has run, and keeps its log-probs for the
    extra loss terms."""

    inputs: dict
    """The loss's own copy of the micro-batch, which TRL reads the old log-probs from after the forward."""
    retrieved_fractions: torch.Tensor | None
    """F_ret per row; ``None`` (evaluation) leaves the ratio unshaped."""
    shaping_weight: float
    """m."""
    logps: torch.Tensor | None = None
    """The forward's per-token log-probs, once it ran."""
    used: int = 0

    def apply(self, per_token_logps: torch.Tensor) -> None:
        self.used += 1
        if self.used > 1:
            raise RolloutHandOverError(
                HOOKS_CHANGED + "_compute_loss ran more than one forward; the shaped old log-probs are ambiguous."
            )
        self.logps = per_token_logps
        if self.retrieved_fractions is None:
            return
        old = self.inputs.get("old_per_token_logps")
        if old is None:
            old = per_token_logps.detach()
        # Only the clipped ratio is shaped: the off-policy mask compares with the sampler's log-probs (TRL falls back
        # to the old ones when none were sampled), and TRL's vLLM importance-sampling correction was computed before
        # the loss from the unshifted old ones.
        self.inputs.setdefault("sampling_per_token_logps", old)
        self.inputs["old_per_token_logps"] = shaped_old_logps(old, self.retrieved_fractions, self.shaping_weight)

    def check_used(self) -> None:
        if self.used != 1:
            raise RolloutHandOverError(
                HOOKS_CHANGED + "_compute_loss did not run _get_per_token_logps_and_entropies; the shaped "
                "importance ratio was not applied."
            )
