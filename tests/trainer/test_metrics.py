"""RAPO's rollout metrics from hand-made rows, and the cross-process mean they use."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from rapo_trl.rollout import RetrievalEvent, RolloutRow, RolloutStats
from rapo_trl.trainer.metrics import (
    gathered_max,
    gathered_mean,
    gathered_sum,
    retrieval_reward_metrics,
    rollout_metrics,
)


def mean(values, weights=None):
    return gathered_mean(Accelerator(cpu=True), values, weights)


def total(value):
    return gathered_sum(Accelerator(cpu=True), value)


def test_gathered_mean_weights_and_empty():
    assert mean([1.0, 3.0]) == 2.0
    assert mean([1.0, 3.0], [3.0, 1.0]) == 1.5
    assert mean([]) == 0.0


class TwoProcesses:
    """An accelerator of two processes, the other one's values ``other`` times this one's."""

    device = torch.device("cpu")

    def __init__(self, other: float):
        self.other = other

    def gather(self, tensor):
        return torch.cat([tensor, tensor * self.other])


def test_phase_seconds_are_the_slowest_processs_not_process_zeros():
    """Process 0's seconds alone hid a process 1 stuck in its tools (the log shows process 0's values)."""
    assert gathered_max(TwoProcesses(other=4.0), 2.0) == 8.0
    stats = RolloutStats(generate_seconds=3.0, tool_seconds=1.0, retrieval_seconds=0.5)
    row = RolloutRow([1], completion_ids=[5] * 4)
    metrics = rollout_metrics([row], stats, store_errors=0, retrieve_prob=0.5, mean=mean, total=total,
                              slowest=lambda value: gathered_max(TwoProcesses(other=10.0), value))
    assert (metrics["rapo/time_generate"], metrics["rapo/time_tools"], metrics["rapo/time_retrieval"]) == (
        30.0, 10.0, 5.0)


def event(pre, post, fallback=False):
    return RetrievalEvent(after_step=0, start=2, end=4, is_fallback=fallback, record_id=None, reward=None,
                          similarity=None, entropy_pre=pre, entropy_post=post)


def test_rollout_metrics_from_rows():
    hybrid = RolloutRow([1], completion_ids=[5] * 8, is_hybrid=True, tool_calls=2, tool_failures=1,
                        retrievals=[event(1.0, 0.5), event(2.0, None, fallback=True)])
    hybrid.segments = []
    plain = RolloutRow([1], completion_ids=[5] * 4, truncated=True, tool_calls=1)
    stats = RolloutStats(generate_seconds=3.0, tool_seconds=1.0, retrieval_seconds=0.5)
    metrics = rollout_metrics([hybrid, plain], stats, store_errors=2, retrieve_prob=0.4, mean=mean, total=total)
    assert metrics["rapo/hybrid_share"] == 0.5
    assert metrics["rapo/retrieval_rate"] == 1.0 and metrics["rapo/retrievals_per_hybrid_rollout"] == 2.0
    assert metrics["rapo/fallback_rate"] == 0.5
    assert metrics["rapo/entropy_before_retrieval"] == 1.5 and metrics["rapo/entropy_after_retrieval"] == 0.5
    assert metrics["rapo/truncated_rate"] == 0.5 and metrics["tools/call_frequency"] == 1.5
    assert metrics["tools/failure_frequency"] == pytest.approx(1 / 3)  # failures over calls, not a mean of rows
    # each process counts its own rows' given-up retrievals: the log holds the run's, summed (here: two processes)
    two = rollout_metrics([hybrid, plain], stats, store_errors=2, retrieve_prob=0.4, mean=mean,
                          total=lambda value: 2 * value)
    assert two["rapo/store_errors"] == 4.0
    assert (metrics["rapo/store_errors"], metrics["rapo/retrieve_prob"], metrics["rapo/time_generate"]) == (2.0, 0.4, 3.0)


def test_a_step_without_retrievals_leaves_their_quantities_out_rather_than_logging_zero():
    """TRL averages a metric over the steps since the last log: a 0 for a step that retrieved nothing would halve
    the entropy or fallback share of a step that did (logging_steps=2), so such a step logs none."""
    plain = RolloutRow([1], completion_ids=[5] * 4, is_hybrid=True, tool_calls=1)
    plain.segments = []
    metrics = rollout_metrics([plain], RolloutStats(), store_errors=0, retrieve_prob=0.5, mean=mean, total=total)
    assert not {"rapo/fallback_rate", "rapo/entropy_before_retrieval", "rapo/entropy_after_retrieval"} & set(metrics)
    assert metrics["rapo/retrieval_rate"] == 0.0 and metrics["tools/call_frequency"] == 1.0


def test_retrieval_reward_metrics_count_rows_that_retrieved_only():
    z = torch.tensor([1.0, -1.0, 0.0, 3.0])
    retrieved = torch.tensor([True, True, False, False])
    metrics = retrieval_reward_metrics(z, retrieved, torch.tensor([0.5, -0.5, 0.0, 0.0]), torch.tensor([0.2, 0.0]))
    assert metrics["rapo/z_mean"] == 0.0 and metrics["rapo/z_positive_share"] == 0.5
    assert metrics["rapo/a_ret_abs_mean"] == 0.25 and metrics["rapo/f_ret_mean"] == pytest.approx(0.1)
    none = retrieval_reward_metrics(z, torch.zeros(4, dtype=torch.bool), torch.zeros(4), torch.zeros(1))
    assert not {"rapo/z_mean", "rapo/z_std", "rapo/z_positive_share"} & set(none)  # undefined: left out, not 0
    one = retrieval_reward_metrics(z, torch.tensor([True, False, False, False]), torch.zeros(4), torch.zeros(1))
    assert one["rapo/z_mean"] == 1.0 and "rapo/z_std" not in one
