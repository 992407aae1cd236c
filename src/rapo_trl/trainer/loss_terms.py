"""Extra loss terms added to TRL's policy loss: one class and one RAPOConfig weight field each.

A term acts twice. When the step is scored it adds one tensor to the batch (TRL splits, shuffles and trims it with
the rest); at each micro-batch's loss it turns the loss forward's log-probs and that tensor into a scalar, on the
DAPO token mean's scale. ``RAPOTrainer._compute_loss`` adds every term whose tensor is in the batch and logs it
under the term's ``metric``. A new term: a class here with ``weight_field`` naming its RAPOConfig field, listed in
``LOSS_TERMS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch

from rapo_trl.core.objective import retrieved_token_loss, retrieved_token_weights

RETRIEVED_WEIGHT_KEY = "rapo_retrieved_token_weight"
"""Per-token weights (``w * A`` or ``w * R_stored``) of the retrieved-token loss in the scored batch ([B, T_completion])."""


class LossTerm(Protocol):
    key: ClassVar[str]
    """The batch field the term adds when the step is scored."""
    metric: ClassVar[str]
    """The metric its loss is logged under."""
    weight_field: ClassVar[str]
    """The RAPOConfig field that turns it on (a weight above 0)."""

    @classmethod
    def from_config(cls, args) -> LossTerm: ...

    def batch_field(self, rows, advantages: torch.Tensor, completion_mask: torch.Tensor
                    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The tensor to add to the scored batch under ``key``, and counts over this process's rows (logged summed
        over processes)."""

    def loss(self, per_token_logps: torch.Tensor, field: torch.Tensor, normalizer: torch.Tensor) -> torch.Tensor:
        """The term's loss on one micro-batch; ``normalizer`` is the DAPO token mean's."""


@dataclass(frozen=True)
class RetrievedTokenLoss:
    """A loss on the retrieved steps' own tokens (docs/design.md, Guided retrieval): ``-sum(w * c * f(pi)) /
    normalizer``, c the row's positive advantage or the stored trajectory's reward (``credit``)."""

    key: ClassVar[str] = RETRIEVED_WEIGHT_KEY
    metric: ClassVar[str] = "rapo/retrieved_token_loss"
    weight_field: ClassVar[str] = "retrieved_token_loss_weight"

    weight: float
    shaping: float | None
    credit: str = "advantage"

    @classmethod
    def from_config(cls, args) -> RetrievedTokenLoss:
        return cls(args.retrieved_token_loss_weight, args.retrieved_token_shaping, args.retrieved_token_credit)

    def batch_field(self, rows, advantages, completion_mask):
        weights = retrieved_token_weights(rows, advantages, self.weight, completion_mask.size(1), self.credit)
        weights = weights * completion_mask  # rows TRL masks (mask_truncated_completions) learn nothing
        return weights, {"rapo/retrieved_tokens_learned": float((weights != 0).sum())}

    def loss(self, per_token_logps, field, normalizer):
        return retrieved_token_loss(per_token_logps, field, self.shaping, normalizer)


LOSS_TERMS: tuple[type[LossTerm], ...] = (RetrievedTokenLoss,)


def loss_terms(args) -> list[LossTerm]:
    """The extra terms ``args`` turns on."""
    return [term.from_config(args) for term in LOSS_TERMS if getattr(args, term.weight_field) > 0]
