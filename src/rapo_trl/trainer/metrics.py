"""RAPO's logged metrics (``rapo/*``, ``tools/*``), averaged over every process's rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rapo_trl.rollout import RolloutRow, RolloutStats
from rapo_trl.trainer.dynamic_sampling import groups_with_signal

CUMULATIVE_METRICS = frozenset({"rapo/store_errors"})
"""Counts over the run (restored on resume): logged at their latest value, where TRL averages a metric's values over
the steps since the last log."""

Mean = Callable[..., float]
"""``mean(values, weights=None)``: the weighted mean over all processes (0.0 when there are no values)."""


def gathered_mean(accelerator, values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Weighted mean of ``values`` across processes; every process must call it (it gathers)."""
    device = accelerator.device
    values_t = torch.tensor(list(values) or [0.0], dtype=torch.float32, device=device)
    if not values:
        weights_t = torch.zeros(1, device=device)
    else:
        weights_t = torch.tensor(list(weights) if weights is not None else [1.0] * len(values), device=device)
    stats = torch.stack([(values_t * weights_t).sum(), weights_t.sum()])
    total, count = accelerator.gather(stats.unsqueeze(0)).sum(dim=0).tolist()
    return total / count if count else 0.0


def gathered_sum(accelerator, value: float) -> float:
    """``value`` summed over processes; every process must call it (it gathers)."""
    stacked = accelerator.gather(torch.tensor([float(value)], dtype=torch.float32, device=accelerator.device))
    return float(stacked.sum())


def gathered_max(accelerator, value: float) -> float:
    """The largest of ``value`` over processes; every process must call it (it gathers)."""
    stacked = accelerator.gather(torch.tensor([float(value)], dtype=torch.float32, device=accelerator.device))
    return float(stacked.max())


def means_where_defined(values_by_name: dict[str, list[float]], mean: Mean,
                        total: Callable[[float], float]) -> dict[str, float]:
    """The mean over processes of each name's values, for the names some process has values of: a share of nothing
    is left out of the log rather than logged as 0. Every process calls it with the same names (it gathers)."""
    return {name: mean(values) for name, values in values_by_name.items() if total(float(len(values))) > 0}



def rollout_metrics(rows: list[RolloutRow], stats: RolloutStats, store_errors: int, retrieve_prob: float,
                    mean: Mean, total: Callable[[float], float],
                    slowest: Callable[[float], float] | None = None) -> dict[str, float]:
    """What the rollout did: retrieval, tools, truncation and time per phase; ``store_errors`` is this process's count
    over the run, logged summed over processes. ``total`` sums a number over processes, ``slowest`` takes its largest
    (the seconds of each phase: processes roll out side by side and the step waits for the slowest; ``None``: one
    process):
    a quantity of the retrievals is left out of a step that made none on any process, rather than logged as 0 (which
    a log over several steps would average in)."""
    events = [e for row in rows for e in row.retrievals]
    hybrid = [row for row in rows if row.is_hybrid]
    called = [row for row in rows if row.tool_calls]
    slowest = slowest or float
    per_retrieval = means_where_defined(
        {"rapo/fallback_rate": [float(e.is_fallback) for e in events],
         "rapo/entropy_before_retrieval": [e.entropy_pre for e in events if e.entropy_pre is not None],
         "rapo/entropy_after_retrieval": [e.entropy_post for e in events if e.entropy_post is not None]},
        mean, total)
    return {
        **per_retrieval,
        "rapo/hybrid_share": mean([float(r.is_hybrid) for r in rows]),
        "rapo/retrieval_rate": mean([float(bool(r.retrievals)) for r in hybrid]),
        "rapo/retrievals_per_hybrid_rollout": mean([float(len(r.retrievals)) for r in hybrid]),
        "rapo/store_errors": total(float(store_errors)),  # each process counts its own rows' retrievals
        "rapo/skipped_retrievals": mean([float(r.skipped_retrievals) for r in hybrid]),
        "rapo/retrieved_fraction": mean([r.retrieved_fraction for r in hybrid]),
        "rapo/retrieve_prob": retrieve_prob,
        "rapo/truncated_rate": mean([float(r.truncated) for r in rows]),
        "tools/call_frequency": mean([float(r.tool_calls) for r in rows]),
        "tools/failure_frequency": mean([r.tool_failures / r.tool_calls for r in called],
                                        [float(r.tool_calls) for r in called]),
        "rapo/time_generate": slowest(stats.generate_seconds),
        "rapo/time_tools": slowest(stats.tool_seconds),
        "rapo/time_retrieval": slowest(stats.retrieval_seconds),
    }


def retrieval_reward_metrics(all_z: torch.Tensor, all_retrieved: torch.Tensor, all_a_ret: torch.Tensor,
                             all_f_ret: torch.Tensor) -> dict[str, float]:
    """The retrieval reward z over rows that retrieved, its advantage and F_ret (all processes' rows); z's mean and
    share are left out of a step where no row retrieved, its spread where fewer than two did."""
    z = all_z[all_retrieved]
    metrics = {"rapo/a_ret_abs_mean": all_a_ret.abs().mean().item(), "rapo/f_ret_mean": all_f_ret.mean().item()}
    if z.numel():
        metrics.update({"rapo/z_mean": z.mean().item(), "rapo/z_positive_share": (z > 0).float().mean().item()})
    if z.numel() > 1:
        metrics["rapo/z_std"] = z.std().item()
    return metrics


def signal_metrics(all_rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """Whether the step's batch (every process's rows) holds a group with unequal rewards, and the share of such
    groups: averaged over logged steps, ``rapo/step_has_signal`` is the share of steps with signal."""
    signal = groups_with_signal(all_rewards, group_size)
    return {"rapo/step_has_signal": float(signal.any()), "rapo/group_signal_share": signal.float().mean().item()}
