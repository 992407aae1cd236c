"""Guided retrieval beyond the paper (``RAPOConfig.guide_failed_groups``): which groups' on-policy rollouts all
failed, so that only they are guided (BREAD, Guide-GRPO)."""

from __future__ import annotations

import torch


def failed_groups(rewards: torch.Tensor, group_size: int, threshold: float) -> torch.Tensor:
    """Per group of ``group_size`` consecutive rows: True when every scored row (NaN: not scored, e.g. a hybrid row
    not yet rolled out) has a reward at or below ``threshold``. A group with no scored row is not failed."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    at_or_below = torch.where(scored, grouped <= threshold, torch.ones_like(scored))
    return at_or_below.all(dim=1) & scored.any(dim=1)
