"""RAPO's objective, top-down, in plain torch (docs/design.md: Retrieval reward, Importance shaping, Loss).

Paper sections 5-7 (Zhang et al., arXiv 2603.03078), in the order a step uses them:

1. ``retrieval_reward`` / ``trajectory_retrieval_reward``: Z of one retrieval from the entropies of the steps
   around it, and a trajectory's Z (the mean over its retrievals).
2. ``group_normalize``: (x - mean_G x) / (std_G x + eps), GRPO's outcome advantage A_acc and RAPO's A_ret alike.
3. ``reweight_advantages``: A = A_acc * (1 + a * A_ret).
4. ``retrieved_fraction``: F_ret, the share of a trajectory's completion tokens that were retrieved.
5. ``shaped_old_logps`` / ``shaped_ratio``: the importance ratio (1 + m * F_ret) * r, r = pi_theta / pi_old.
6. ``dual_clipped_token_loss`` and ``token_mean``: the PPO clip on the shaped ratio with verl's dual clip, averaged
   over the policy's own tokens (DAPO's token mean).
7. ``retrieved_token_mask`` / ``retrieved_token_weights`` / ``retrieved_token_loss``: an optional extra term on the
   retrieved steps' own tokens (beyond the paper: UFT's hint likelihood, LUFFY's shaped off-policy tokens).

``rapo_trl.core.reference.reference_step`` strings them together for one group; ``RAPOTrainer`` calls these same
functions, and hands the shaped old log-probs to TRL's loss, whose clip for ``loss_type="dapo"`` with ``delta`` is
``dual_clipped_token_loss`` (tests/core/test_reference.py holds the two equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

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


def retrieved_fraction(retrieved_tokens: int, completion_tokens: int) -> float:
    """F_ret: retrieved tokens over all completion tokens of a trajectory (0 for an empty completion)."""
    return retrieved_tokens / completion_tokens if completion_tokens else 0.0


def shaped_old_logps(old_logps: torch.Tensor, retrieved_fractions: torch.Tensor, weight: float) -> torch.Tensor:
    """Old log-probs lowered by log(1 + m * F_ret) per row, so that exp(logps - shaped_old) = (1 + m F_ret) r.

    ``old_logps`` is [B, T]; ``retrieved_fractions`` is F_ret per row, [B].
    """
    return old_logps - torch.log1p(weight * retrieved_fractions.float()).unsqueeze(1)


def shaped_ratio(logps: torch.Tensor, old_logps: torch.Tensor, retrieved_fractions: torch.Tensor,
                 weight: float) -> torch.Tensor:
    """r_hat = (1 + m * F_ret) * pi_theta / pi_old per token: the ratio RAPO clips."""
    return torch.exp(logps - shaped_old_logps(old_logps, retrieved_fractions, weight))


def dual_clipped_token_loss(ratio: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float,
                            delta: float | None) -> torch.Tensor:
    """-min(min(r, delta) * A, clip(r, 1 - eps_low, 1 + eps_high) * A) per token; ``advantages`` is [B] or [B, T].

    ``delta`` caps the unclipped ratio (verl's dual clip, c = 3): for A < 0 a ratio far above 1 costs at most
    -delta * A. ``None`` leaves the ordinary PPO clip.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * advantages, clipped * advantages)


def token_mean(per_token_loss: torch.Tensor, mask: torch.Tensor, normalizer: torch.Tensor | float | None = None
               ) -> torch.Tensor:
    """DAPO's aggregation: the sum over the policy's own tokens (``mask``) over their count, or over ``normalizer``
    when the tokens counted span more than this batch (TRL: the generation batch's ``num_items_in_batch``)."""
    if normalizer is None:
        normalizer = mask.sum().clamp(min=1.0)
    return (per_token_loss * mask).sum() / normalizer


def retrieved_token_mask(rows: Sequence, width: int, device: torch.device | str | None = None,
                         event_weight: Callable[[object], float] = lambda event: 1.0) -> torch.Tensor:
    """``event_weight(event)`` (1 by default) on each retrieval's own step tokens (its ``step_tokens`` span) in every
    row, 0 elsewhere. Shape [len(rows), width]."""
    mask = torch.zeros(len(rows), width, dtype=torch.float32, device=device)
    for i, row in enumerate(rows):
        for event in row.retrievals:
            if event.step_tokens is not None:
                start, end = event.step_tokens
                mask[i, start:min(end, width)] = event_weight(event)
    return mask


RETRIEVED_TOKEN_CREDITS = ("advantage", "stored_reward")
"""What vouches for a retrieved step that the retrieved-token loss trains on (``retrieved_token_credit``)."""


def checked_retrieved_token_credit(credit: str) -> str:
    """``credit`` if it is one of ``RETRIEVED_TOKEN_CREDITS``; a ValueError naming them otherwise."""
    if credit not in RETRIEVED_TOKEN_CREDITS:
        raise ValueError(f"retrieved_token_credit must be one of {RETRIEVED_TOKEN_CREDITS}, got {credit!r}.")
    return credit


def retrieved_token_weights(rows: Sequence, advantages: torch.Tensor, weight: float, width: int,
                            credit: str = "advantage") -> torch.Tensor:
    """Per-token weights of the retrieved-token loss on the retrieved steps' own tokens, 0 elsewhere; shape
    [len(rows), width].

    ``credit="advantage"``: ``weight * A_i`` on every retrieved step of a row whose advantage is positive (reward
    above the group mean), the row's success vouching for the step. ``credit="stored_reward"``: ``weight * R`` on
    each retrieved step whose stored trajectory scored R > 0, whatever the row then scored: the store's success
    vouches for it, so a guided row that still fails teaches its stored step too.
    """
    if checked_retrieved_token_credit(credit) == "stored_reward":
        return retrieved_token_mask(rows, width, advantages.device,
                                    lambda event: weight * max(float(event.reward or 0.0), 0.0))
    weights = retrieved_token_mask(rows, width, advantages.device)
    for i in range(len(rows)):
        advantage = float(advantages[i].max() if advantages.dim() == 2 else advantages[i])
        weights[i] *= weight * advantage if advantage > 0 else 0.0
    return weights


def retrieved_token_loss(per_token_logps: torch.Tensor, weights: torch.Tensor, shaping: float | None,
                         normalizer: torch.Tensor | float) -> torch.Tensor:
    """``-sum(weights * f(pi)) / normalizer`` with f(pi) = pi / (pi + shaping) (LUFFY) or log pi (``None``: UFT).

    The behaviour probability of a store's token is taken as 1 (no sampler produced it), so its ratio is pi_theta
    itself; no clipping applies. ``normalizer`` is the DAPO token mean's, so a token weighs like a sampled one.
    """
    weights = weights.to(per_token_logps.dtype)
    if shaping is None:
        values = per_token_logps
    else:
        probs = per_token_logps.exp()
        values = probs / (probs + shaping)
    return -(weights * values).sum() / normalizer
