"""Guided retrieval options beyond the paper (``RAPOConfig.guide_failed_groups``, ``retrieved_token_loss_weight``).

- ``failed_groups``: which groups' on-policy rollouts all failed (guide only there: BREAD, Guide-GRPO).
- ``retrieved_token_weights`` / ``retrieved_token_loss``: a loss on the retrieved steps' own tokens of rollouts
  with a positive advantage (UFT's hint likelihood; LUFFY's shaped off-policy tokens).
"""

from __future__ import annotations

import torch

RETRIEVED_WEIGHT_KEY = "rapo_retrieved_token_weight"
"""Per-token weights ``w * A`` of the retrieved-token loss in the scored batch ([B, T_completion])."""


def failed_groups(rewards: torch.Tensor, group_size: int, threshold: float) -> torch.Tensor:
    """Per group of ``group_size`` consecutive rows: True when every scored row (NaN: not scored, e.g. a hybrid row
    not yet rolled out) has a reward at or below ``threshold``. A group with no scored row is not failed."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    at_or_below = torch.where(scored, grouped <= threshold, torch.ones_like(scored))
    return at_or_below.all(dim=1) & scored.any(dim=1)


def retrieved_token_weights(rows, advantages: torch.Tensor, weight: float, width: int) -> torch.Tensor:
    """``weight * A_i`` on the retrieved steps' own tokens (``RetrievalEvent.step_tokens``) of every row whose
    advantage is positive (reward above the group mean); 0 elsewhere. Shape [len(rows), width]."""
    weights = torch.zeros(len(rows), width, dtype=torch.float32, device=advantages.device)
    for i, row in enumerate(rows):
        advantage = float(advantages[i].max() if advantages.dim() == 2 else advantages[i])
        if advantage <= 0:
            continue
        for event in row.retrievals:
            if event.step_tokens is not None:
                start, end = event.step_tokens
                weights[i, start:min(end, width)] = weight * advantage
    return weights


def retrieved_token_loss(per_token_logps: torch.Tensor, weights: torch.Tensor, shaping: float | None,
                         normalizer: torch.Tensor | float) -> torch.Tensor:
    """``-sum(weights * f(pi)) / normalizer`` with f(pi) = pi / (pi + shaping) (LUFFY) or log pi (``None``: UFT).

    The behaviour probability of a store's token is taken as 1 (no sampler produced it), so its ratio is pi_theta
    itself; no clipping applies. ``normalizer`` is the DAPO token-mean's, so a token weighs like a sampled one.
    """
    weights = weights.to(per_token_logps.dtype)
    if shaping is None:
        values = per_token_logps
    else:
        probs = per_token_logps.exp()
        values = probs / (probs + shaping)
    return -(weights * values).sum() / normalizer
