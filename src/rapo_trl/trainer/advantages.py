"""RAPO's advantage for TRL's batch: the outcome advantage against the configured baseline, then the retrieval-reward
reweighting, each with its statistics over whole groups."""

from __future__ import annotations

import torch

from rapo_trl.core.advantage_baselines import DEFAULT_BASELINE, outcome_advantages, shown_mask
from rapo_trl.core.objective import group_normalize, reweight_advantages, trajectory_retrieval_reward
from rapo_trl.trainer.metrics import retrieval_reward_metrics

OUTCOME_ADVANTAGE_EPSILON = 1e-4
"""TRL's eps in (R - mean) / (std + eps)."""


def baseline_advantages(rows, all_rewards: torch.Tensor, advantages: torch.Tensor, accelerator, group_size: int,
                        baseline: str) -> torch.Tensor:
    """This process's A_acc against ``baseline`` (``core.advantage_baselines``), from every process's rewards.

    The default baseline is the one TRL computes itself: its advantages are kept as they are, so every TRL option
    on them (``scale_rewards``, rows without a reward) still applies. Another baseline needs each row's mask of
    shown stored steps, gathered like the rewards: groups may straddle processes.
    """
    if baseline == DEFAULT_BASELINE:
        return advantages
    all_shown = accelerator.gather(shown_mask(rows).float().to(accelerator.device)).bool()
    all_advantages = outcome_advantages(all_rewards, all_shown, group_size, baseline, OUTCOME_ADVANTAGE_EPSILON)
    start = accelerator.process_index * len(rows)
    return all_advantages[start : start + len(rows)].to(advantages.dtype)


def retrieval_terms(rows, advantages: torch.Tensor, accelerator, group_size: int, args):
    """(advantages reweighted by the group-normalised retrieval reward, F_ret per row, metrics).

    Groups may straddle processes, so Z is gathered before it is normalised per group.
    """
    device = accelerator.device
    z = torch.tensor([trajectory_retrieval_reward((e.entropy_pre, e.entropy_post) for e in row.retrievals)
                      for row in rows], dtype=torch.float32, device=device)
    all_z = accelerator.gather(z)
    all_a_ret = group_normalize(all_z, group_size, eps=args.retrieval_advantage_epsilon)
    start = accelerator.process_index * len(rows)
    a_ret = all_a_ret[start : start + len(rows)].to(advantages.dtype)
    f_ret = torch.tensor([row.retrieved_fraction for row in rows], dtype=torch.float32, device=device)
    retrieved = z.new_tensor([float(bool(row.retrievals)) for row in rows])
    metrics = retrieval_reward_metrics(all_z, accelerator.gather(retrieved).bool(), all_a_ret, accelerator.gather(f_ret))
    return reweight_advantages(advantages, a_ret, args.retrieval_advantage_weight), f_ret, metrics
