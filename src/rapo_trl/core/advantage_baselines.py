"""The outcome advantage's baseline: which rows of a group set the mean and std of A_acc = (R - mean) / (std + eps).

A table, ``ADVANTAGE_BASELINES`` (``RAPOConfig.advantage_baseline``): name -> a function of one group's rewards and
its mask of rows shown a stored step, returning the group's advantages. ``reference_step`` and ``RAPOTrainer`` both
take A_acc from it (``outcome_advantages``); the retrieval reward's reweighting comes after, unchanged.

- ``"group"``: mean and std over every row of the group: GRPO's, the paper's, TRL's. The default.
- ``"on_policy"``: mean and std over the rows not shown a stored step, applied to every row of the group (LUFFY's
  on-policy statistics): a row handed a stored step that succeeds no longer pulls the baseline up, so it does not
  push the on-policy rows below zero. A std of 0 (one on-policy row, or all on-policy rewards equal) counts as 1, so
  the shown rows still get R - mean; a group with no on-policy row falls back to the whole group's statistics.
  Rows without a reward (NaN) are left out of the statistics and get 0, as TRL does.

A new baseline: a function here with ``group_baseline``'s signature, listed in ``ADVANTAGE_BASELINES``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rapo_trl.core.objective import group_normalize

AdvantageBaseline = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
"""``baseline(rewards, shown, eps)``: one group's rewards [G] and its rows shown a stored step (bool [G]) to A_acc."""

DEFAULT_BASELINE = "group"


def group_baseline(rewards: torch.Tensor, shown: torch.Tensor, eps: float) -> torch.Tensor:
    """(R - mean_G R) / (std_G R + eps) over the whole group, whichever rows were shown a stored step."""
    return group_normalize(rewards, rewards.numel(), eps=eps)


def on_policy_baseline(rewards: torch.Tensor, shown: torch.Tensor, eps: float) -> torch.Tensor:
    """(R - mean R_on) / (std R_on + eps) with R_on the rewards of the rows not shown a stored step; std 0 -> 1.

    A row without a reward (NaN: no reward function scored it) is left out of the statistics and gets 0, as TRL
    treats it."""
    rewards = rewards.float()
    scored = ~torch.isnan(rewards)
    on_policy = scored & ~shown
    reference = rewards[on_policy if on_policy.any() else scored]
    if reference.numel() == 0:
        return torch.zeros_like(rewards)
    mean = reference.mean()
    std = reference.std() if reference.numel() > 1 else torch.zeros_like(mean)
    advantages = (rewards - mean) / (torch.where(std > 0, std, torch.ones_like(std)) + eps)
    return torch.nan_to_num(advantages, nan=0.0)


ADVANTAGE_BASELINES: dict[str, AdvantageBaseline] = {"group": group_baseline, "on_policy": on_policy_baseline}


def shown_a_stored_step(row) -> bool:
    """A hybrid row that a stored step was inserted into (a fallback text alone does not count)."""
    return row.is_hybrid and any(not event.is_fallback for event in row.retrievals)


def shown_mask(rows: Sequence) -> torch.Tensor:
    """Which of ``rows`` were shown a stored step, as a bool tensor."""
    return torch.tensor([shown_a_stored_step(row) for row in rows], dtype=torch.bool)


def outcome_advantages(rewards: torch.Tensor, shown: torch.Tensor, group_size: int, baseline: str = DEFAULT_BASELINE,
                       eps: float = 1e-4) -> torch.Tensor:
    """A_acc of every row, ``baseline`` applied to each consecutive group of ``group_size`` rows."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}.")
    function = ADVANTAGE_BASELINES[checked_baseline(baseline)]
    shown = shown.to(device=rewards.device, dtype=torch.bool)
    groups = zip(rewards.view(-1, group_size), shown.view(-1, group_size), strict=True)
    return torch.cat([function(group, mask, eps) for group, mask in groups])


def checked_baseline(name: str) -> str:
    """``name`` if it is one of ``ADVANTAGE_BASELINES``, else a ValueError naming them."""
    if name not in ADVANTAGE_BASELINES:
        raise ValueError(f"advantage_baseline must be one of {tuple(ADVANTAGE_BASELINES)}, got {name!r}.")
    return name
