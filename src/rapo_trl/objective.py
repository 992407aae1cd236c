"""RAPO's objective terms as pure functions (docs/design.md: Retrieval reward, Importance shaping).

- ``retrieval_reward``: Z of one retrieval from the entropies of the steps around it.
- ``trajectory_retrieval_reward``: a trajectory's Z (mean over its retrievals).
- ``group_normalize`` / ``reweight_advantages``: A = A_acc * (1 + a * A_ret).
- ``ratio_log_shift``: log(1 + m * F_ret), the shift that turns TRL's ratio r into (1 + m F_ret) r.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

ENTROPY_EPS = 1e-6


def retrieval_reward(entropy_pre: float, entropy_post: float, eps: float = ENTROPY_EPS) -> float:
    """Z = tanh(2 * H_delta) * H_pre with H_delta = -(H_post - H_pre) / (H_pre + eps).

    Positive when the step after the retrieval is more certain than the step before it, scaled by how
    uncertain the policy was before.
    """
    delta = -(entropy_post - entropy_pre) / (entropy_pre + eps)
    return math.tanh(2.0 * delta) * entropy_pre


def trajectory_retrieval_reward(pairs: Iterable[tuple[float | None, float | None]]) -> float:
    """Mean Z over a trajectory's retrievals; a retrieval missing either entropy is skipped; 0 if none."""
    values = [retrieval_reward(pre, post) for pre, post in pairs if pre is not None and post is not None]
    return float(sum(values) / len(values)) if values else 0.0


def group_normalize(values: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """(x - mean_G x) / (std_G x + eps) within consecutive groups of ``group_size`` (unbiased std, as TRL)."""
    if values.numel() % group_size:
        raise ValueError(f"{values.numel()} values do not split into groups of {group_size}.")
    grouped = values.view(-1, group_size).float()
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + eps)).view(-1)


def reweight_advantages(
    advantages: torch.Tensor, retrieval_advantages: torch.Tensor, weight: float
) -> torch.Tensor:
    """A = A_acc * (1 + a * A_ret); works for advantages of shape (B,) or (B, T)."""
    factor = 1.0 + weight * retrieval_advantages.to(advantages.dtype)
    if advantages.dim() == 2:
        factor = factor.unsqueeze(1)
    return advantages * factor


def ratio_log_shift(retrieved_fraction: torch.Tensor, weight: float) -> torch.Tensor:
    """log(1 + m * F_ret): subtracting it from old log-probs makes the clipped ratio (1 + m F_ret) r."""
    return torch.log1p(weight * retrieved_fraction.float())
